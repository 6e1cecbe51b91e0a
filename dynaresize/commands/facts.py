"""The run-fact flags every trace command takes, and the block of assumed facts it prints first.

A log may not say the GPU split, the model size, the GPU memory or the link; `run --mode replay`,
`breakeven`, `calibrate` and `validate` take them as the same flags (or from `--config`), print
what they still had to assume in one short block at the top, and with `--strict` refuse to
assume anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from dynaresize.twin.run_facts import AssumedFact, RunFacts

TRAIN_GPUS = typer.Option(
    None, "--train-gpus", min=1, help="GPUs the traced run gave Training (with --rollout-gpus)."
)
ROLLOUT_GPUS = typer.Option(
    None, "--rollout-gpus", min=1, help="GPUs the traced run gave Rollout (with --train-gpus)."
)
MODEL_PARAMS_B = typer.Option(
    None, "--model-params-b", min=0.001, help="Model size of the traced run (B parameters)."
)
GPU_MEMORY_GB = typer.Option(
    None, "--gpu-memory-gb", min=0.001, help="Memory of one GPU of the traced run (GB)."
)
LINK_GBPS = typer.Option(
    None, "--link-gbps", min=0.001, help="Trainer-to-rollout link bandwidth (GB/s)."
)
STRICT = typer.Option(
    False, "--strict", help="Refuse to assume any fact the log, flags and config leave out."
)


def run_facts(
    train_gpus: int | None,
    rollout_gpus: int | None,
    model_params_b: float | None,
    gpu_memory_gb: float | None,
    link_gbps: float | None,
) -> RunFacts:
    """The flags as `RunFacts` (a half-given split raises ConfigError)."""
    from dynaresize.twin.run_facts import RunFacts

    return RunFacts(
        train_gpus=train_gpus,
        rollout_gpus=rollout_gpus,
        model_params_b=model_params_b,
        gpu_memory_gb=gpu_memory_gb,
        link_gbps=link_gbps,
    )


def print_assumed(
    facts: list[AssumedFact] | tuple[AssumedFact, ...], warnings: tuple[str, ...] = ()
) -> None:
    """The assumed facts, then any warning about costs used outside their fitted range."""
    from dynaresize.twin.run_facts import assumed_block

    for line in [*assumed_block(facts), *warnings]:
        print(line)
