"""The one switch of the project's compiled (numba) paths: DYNARESIZE_NO_NUMBA=1 runs every one
of them in numpy or plain Python instead (the same results: each compiled path has a reference
beside it). Kept in the lowest layer that compiles anything, so that the synthetic workloads and
the twin's kernels read the same switch."""

from __future__ import annotations

import os

__all__ = ["NO_NUMBA_ENV", "numba_disabled"]

NO_NUMBA_ENV = "DYNARESIZE_NO_NUMBA"


def numba_disabled() -> bool:
    """Whether DYNARESIZE_NO_NUMBA asks every compiled path to run in numpy/Python."""
    return os.environ.get(NO_NUMBA_ENV, "").strip() not in ("", "0")
