"""Convert a log to the project's trace format and say what was inferred:

    python -m dynaresize.traces.importers run.jsonl --out run_trace --train-gpus 6 --rollout-gpus 2

Bad input prints one line naming file, line or row, and field, and exits with code 2.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import TraceError
from ..io import write_trace
from . import SHIPPED_MAPPINGS, ImportOptions, import_trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynaresize.traces.importers")
    parser.add_argument("path", help="verl JSONL, CSV metrics table, or a dynaresize trace")
    parser.add_argument("--out", required=True, help="trace directory (Parquet) or .jsonl file")
    parser.add_argument("--mapping", choices=sorted(SHIPPED_MAPPINGS), help="CSV mapping")
    parser.add_argument("--lenient", action="store_true", help="skip bad rows, report them")
    for flag in ("num-gpus", "train-gpus", "rollout-gpus", "num-samples-per-step"):
        parser.add_argument(f"--{flag}", type=int)
    args = parser.parse_args(argv)
    try:
        options = ImportOptions(
            num_gpus=args.num_gpus,
            train_gpus=args.train_gpus,
            rollout_gpus=args.rollout_gpus,
            num_samples_per_step=args.num_samples_per_step,
        )
        trace = import_trace(args.path, mapping=args.mapping, options=options, lenient=args.lenient)
        write_trace(args.out, trace)
    except (TraceError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{len(trace.steps)} steps from {args.path} -> {args.out}")
    for note in trace.meta.notes:
        print(f"  inferred: {note}")
    if trace.skipped:
        print(f"  {trace.skipped_summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
