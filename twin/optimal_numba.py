"""The compiled forward pass of the offline optimum's dynamic program (`optimal._forward`).

Kept in its own module, at module level, so that numba's on-disk cache (`cache=True`) finds it
again in the next process. The same arithmetic and choices as the Python loop, in the same
order (IEEE doubles, no fast-math): the first smallest `best[p] + resize[p, c]`, staying put
when it ties, then the step's own time; so the two give the same schedule to the bit.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def forward(
    step_s: np.ndarray, into: np.ndarray, best: np.ndarray, came_from: np.ndarray
) -> np.ndarray:
    """Steps 1.. of the program: fills `came_from[k]`; returns the last `best`. `into[c, p]`
    is the cost of moving from p to c."""
    num_steps, num_candidates = step_s.shape
    best = best.copy()
    reached = np.empty(num_candidates)
    for k in range(1, num_steps):
        for c in range(num_candidates):
            where = 0
            value = best[0] + into[c, 0]
            for p in range(num_candidates):
                via = best[p] + into[c, p]
                if via < value:
                    where = p
                    value = via
            if best[c] <= value:
                where = c
                value = best[c] + into[c, c]
            came_from[k, c] = where
            reached[c] = value + step_s[k, c]
        best[:] = reached
    return best
