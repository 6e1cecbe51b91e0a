"""A colocated run (veRL's default: every GPU generates, then trains) judged as what it was.

A colocated run used no train:rollout split, so replaying it "from 4:4" answers a question the
run never posed. What it does pose: what would a disaggregated split, held or resized, have done
on the same workload? The recorded colocated run is then its own baseline row, predicted by the
twin's cost models without a pipeline (generate, train, push weights, in turn), and the
disaggregated what-ifs start from a split the user gives (`--train-gpus`/`--rollout-gpus` or a
config), else from the split the twin finds fastest on the run's first steps, stated as an
assumed fact. The offline optimum is over disaggregated schedules only: the colocated run is not
one of them, so it has no regret against it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dynaresize.policies.types import Allocation
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream, workload_blocks

from ..costs.rollout import rollout_stage_s_many
from ..costs.sync import weight_sync_s
from ..costs.train import train_stage_s
from ..run_facts import COLOCATED_START_FACT, AssumedFact, with_fact_value
from ..step_costs import StepCosts

START_WINDOW_STEPS = 5
"""The first steps whose modelled times pick a colocated run's disaggregated start split."""


def fastest_start(step_costs: StepCosts) -> Allocation:
    """The split with the shortest modelled steps over the run's first few steps: what a user
    would start a disaggregated run on after a short profile."""
    window = step_costs.step_s[: max(1, min(START_WINDOW_STEPS, step_costs.num_steps))]
    return step_costs.candidates[int(np.argmin(window.mean(axis=0)))]


def with_start_fact(assumed: tuple[AssumedFact, ...], start: Allocation) -> tuple[AssumedFact, ...]:
    """`assumed` with the start split's placeholder value replaced by the split picked."""
    value = f"{start.label}, the twin's fastest split on the first {START_WINDOW_STEPS} steps"
    return with_fact_value(assumed, COLOCATED_START_FACT, value)


def colocated_prediction(
    steps: pd.DataFrame, workload: Workload | WorkloadStream, scenario
) -> pd.DataFrame:
    """The twin's step times of a colocated run: every GPU generates, then every GPU trains,
    then the weights reach the engines; nothing overlaps (the cost models, no pipeline). A
    streamed workload is costed a block of steps at a time (each step's time is its own)."""
    gpus = steps["train_gpus"].to_numpy(np.int64)
    replicas = np.maximum(1, gpus // scenario.cluster.rollout_tensor_parallel_size)
    step_s = np.empty(len(steps))
    for first, block in workload_blocks(workload):
        rows = slice(first, first + block.num_steps)
        step_s[rows] = _block_step_s(block, gpus[rows], replicas[rows], scenario)
    if len(step_s):
        # The run's first step pays the one-time warm-ups, as in `stage_time_components`.
        costs = scenario.costs
        step_s[0] += costs.rollout.first_step_warmup_s + costs.train.first_step_warmup_s
    sync = weight_sync_s(
        weights_gb=scenario.model.weights_gb,
        bandwidth_gbps=scenario.cluster.weight_sync_bandwidth_gbps(),
        params=scenario.costs.sync,
    )
    return pd.DataFrame({"step": steps["step"].to_numpy(), "step_s": step_s + sync})


def _block_step_s(
    workload: Workload, gpus: np.ndarray, replicas: np.ndarray, scenario
) -> np.ndarray:
    """Generate plus train of each step of one held block, before warm-ups and sync."""
    tokens = workload.tokens_per_step()
    step_s = np.empty(len(gpus))
    for n in np.unique(gpus):
        rows = gpus == n
        r = int(replicas[rows][0])
        rollout = rollout_stage_s_many(workload, num_replicas=r, params=scenario.costs.rollout)
        train = train_stage_s(
            tokens, train_gpus=int(n), model=scenario.model, params=scenario.costs.train
        )
        step_s[rows] = (rollout + train)[rows]
    return step_s


def modelled_stage_steps(step_costs: StepCosts, start: Allocation) -> pd.DataFrame:
    """Rollout and training times of every step on `start`, as the twin models them: the
    imbalance a disaggregated run would have seen (a colocated run's own stage times, both on
    every GPU, say nothing about it)."""
    c = step_costs.index(start)
    return pd.DataFrame(
        {"rollout_s": step_costs.rollout_s[:, c], "train_s": step_costs.train_s[:, c]}
    )
