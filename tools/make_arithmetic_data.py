"""Write the arithmetic task shipped in dynaresize/data/arithmetic/, in veRL's Parquet format.

Each row asks for a sum of two numbers below 20 or a product of two numbers below 10, as one chat
message (`What is 12 + 7?`); the expected response ends with `#### 19`, and the ground truth is the
number as a string, as in veRL's GSM8K preprocessing, so the built-in `final_number` reward checks
it. The task is kept this small on purpose: a tiny model warm-started for a minute or two on one
core answers a fair share of it right (not all), so that GRPO groups hold both right and wrong
answers and a short CPU run has a signal to learn from (with operands below 100 the warm start got
about 5% right and the reward did not move). Questions are drawn without repeats from a fixed seed
(here every question of the two tables) and split into train and test with no question in both;
running the script again writes the same rows.

    python tools/make_arithmetic_data.py                # rewrites train.parquet and test.parquet
    python tools/make_arithmetic_data.py --out DIR      # somewhere else
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

DATA_DIR = Path(__file__).resolve().parents[1] / "dynaresize" / "data" / "arithmetic"
DATA_SOURCE = "dynaresize/arithmetic"
NUM_TRAIN_ROWS, NUM_TEST_ROWS = 400, 100
SUM_OPERAND_LIMIT = 20  # both operands of a sum are below this
PRODUCT_LIMITS = (10, 10)  # operands of a product are below these
PRODUCT_SHARE = 0.2
SEED = 20_240_601


def questions(rng: np.random.Generator, count: int) -> list[tuple[int, str, int]]:
    """`count` distinct (a, op, b), a `PRODUCT_SHARE` of them products, in random order."""
    num_products = round(count * PRODUCT_SHARE)
    sums = rng.choice(SUM_OPERAND_LIMIT**2, size=count - num_products, replace=False)
    products = rng.choice(PRODUCT_LIMITS[0] * PRODUCT_LIMITS[1], size=num_products, replace=False)
    drawn = [(int(i) // SUM_OPERAND_LIMIT, "+", int(i) % SUM_OPERAND_LIMIT) for i in sums]
    drawn += [(int(i) // PRODUCT_LIMITS[1], "*", int(i) % PRODUCT_LIMITS[1]) for i in products]
    return [drawn[i] for i in rng.permutation(len(drawn))]


def row(a: int, op: str, b: int, *, split: str, index: int) -> dict[str, Any]:
    answer = a + b if op == "+" else a * b
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"What is {a} {op} {b}?"}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"split": split, "index": index, "response": f"#### {answer}"},
    }


def arithmetic_rows(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    drawn = questions(np.random.default_rng(seed), NUM_TRAIN_ROWS + NUM_TEST_ROWS)
    test, train = drawn[:NUM_TEST_ROWS], drawn[NUM_TEST_ROWS:]
    return {
        split: [row(*q, split=split, index=i) for i, q in enumerate(items)]
        for split, items in (("train", train), ("test", test))
    }


def write(out_dir: Path, seed: int = SEED) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for split, rows in arithmetic_rows(seed).items():
        path = out_dir / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="folder to write into")
    args = parser.parse_args()
    for path in write(args.out):
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
