"""Whether a cost file on disk is one `dynaresize calibrate` wrote, as it wrote it.

Calibrate stamps its output with `fitted_on` (what it was fitted on, and a digest of each fitted
section: twin/costs/provenance.py); `validate` judges fitted costs only and reads that stamp.
Here the same test answers a command's question about a path: may `calibrate` replace this
existing `--out` file? Only if calibrate wrote it; a user's file is never overwritten.
"""

from __future__ import annotations

from pathlib import Path

from dynaresize.config_io import ConfigError, load_yaml_mapping
from dynaresize.twin.costs.provenance import written_by_calibrate as stamp_problem


def calibrate_stamp_problem(path: Path) -> str | None:
    """None if `path` is calibrate's output as written, else what is wrong with it."""
    try:
        mapping = load_yaml_mapping(path)
    except ConfigError as err:
        return str(err)
    return stamp_problem(mapping)


def written_by_calibrate(path: Path) -> bool:
    return calibrate_stamp_problem(path) is None
