"""Break-even of a resize, and settings a user can act on, from a trace.

A resize stalls the pipeline for its critical path `C` seconds and then saves `s` seconds on every
step that runs on the new split. It has paid for itself after `C / s` steps: the break-even.
On the paper's numbers, 187.2 s / (39.84 s - 23.93 s) = 11.8 steps.

From a trace:
- per-step savings of every transition between candidate splits come from the twin's step times
  on the trace's own workload (with costs fitted to the trace), so they vary step to step as the
  workload does; the break-even's confidence interval is a moving-block bootstrap of the mean
  saving (blocks keep the autocorrelation of drifting lengths);
- the critical-path cost is the mean measured stall of the trace's own resizes when it has any,
  else the twin's resize model;
- how long imbalances last is read off the measured stage times: runs of consecutive steps whose
  signed imbalance (policies.signals) stays beyond a threshold on the same side.

Advice (docs/breakeven.md explains each rule):
- cooldown: the upper end of the break-even interval, so a second resize never comes before the
  first could have repaid itself;
- dwell: the break-even itself;
- consecutive signals k: the k that best separates imbalance runs long enough to repay a resize
  started after k signals (length >= k + break-even) from those that are not;
- thresholds: the smallest |imbalance| at which the mean saving of moving towards the bottleneck
  repays the resize within the typical imbalance run;
- projection for a job of N steps: N times the mean per-step saving of the best move, less one
  resize, in hours and GPU-hours.

This module holds the arithmetic and the rules (imbalance runs in `imbalance_runs`);
`trace_breakeven` applies them to a trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dynaresize.policies.types import Allocation

from .imbalance_runs import (
    ImbalanceRuns,
    imbalance_runs,
    recommended_consecutive_signals,
    recommended_threshold,
    run_lengths,
    signed_imbalance,
)

__all__ = [
    "Advice",
    "BreakEven",
    "BreakevenReport",
    "ImbalanceRuns",
    "analyse",
    "block_bootstrap_means",
    "break_even_steps",
    "imbalance_runs",
    "paper_break_even_steps",
    "recommended_consecutive_signals",
    "recommended_threshold",
    "run_lengths",
    "signed_imbalance",
    "transition_break_even",
]

PAPER_RESIZE_CRITICAL_S = 187.2
PAPER_STEP_BEFORE_S = 39.84
PAPER_STEP_AFTER_S = 23.93


def break_even_steps(cost_s: float, saving_per_step_s: float) -> float | None:
    """Steps a resize costing `cost_s` needs to repay itself; None if it never does."""
    if saving_per_step_s <= 0:
        return None
    return cost_s / saving_per_step_s


def block_bootstrap_means(
    values: np.ndarray, *, num_resamples: int, seed: int, block_steps: int | None = None
) -> np.ndarray:
    """Means of moving-block bootstrap resamples of `values` (block ~ n^(1/3) by default)."""
    n = len(values)
    if n == 0:
        raise ValueError("cannot bootstrap an empty series")
    block = block_steps or max(1, round(n ** (1 / 3)))
    block = min(block, n)
    num_blocks = math.ceil(n / block)
    cumulative = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    block_sums = cumulative[block:] - cumulative[:-block]  # one per start position
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(block_sums), size=(num_resamples, num_blocks))
    return block_sums[starts].sum(axis=1) / (num_blocks * block)


@dataclass(frozen=True)
class BreakEven:
    """Break-even of one transition, with its bootstrap interval."""

    from_allocation: str
    to_allocation: str
    cost_s: float
    mean_saving_per_step_s: float
    steps: float | None
    """None: the move never repays itself on this trace (no mean saving)."""
    ci_low_steps: float | None
    ci_high_steps: float | None
    """None: within the interval the saving may vanish, so the break-even is unbounded above."""
    confidence: float


def transition_break_even(
    *,
    from_label: str,
    to_label: str,
    cost_s: float,
    savings_s: np.ndarray,
    confidence: float = 0.9,
    num_resamples: int = 2000,
    seed: int = 0,
) -> BreakEven:
    """Break-even of one move from per-step savings, with a block-bootstrap interval."""
    mean = float(np.mean(savings_s))
    means = block_bootstrap_means(savings_s, num_resamples=num_resamples, seed=seed)
    tail = (1 - confidence) / 2
    low_mean, high_mean = np.quantile(means, [tail, 1 - tail])
    # Break-even falls as the saving rises: the high mean gives the low end of the interval.
    return BreakEven(
        from_allocation=from_label,
        to_allocation=to_label,
        cost_s=cost_s,
        mean_saving_per_step_s=mean,
        steps=break_even_steps(cost_s, mean),
        ci_low_steps=break_even_steps(cost_s, float(high_mean)),
        ci_high_steps=break_even_steps(cost_s, float(low_mean)),
        confidence=confidence,
    )


# --- the whole analysis -----------------------------------------------------------------------


@dataclass(frozen=True)
class Advice:
    """Settings derived from the moves the report shows; all None when the split should stay."""

    cooldown_steps: int | None
    dwell_steps: int | None
    consecutive_signals: int | None
    up_threshold: float | None
    """Imbalance above which to move GPUs to Rollout; None: never pays on this trace."""
    down_threshold: float | None
    """Imbalance below minus this to move GPUs to Training; None: never pays on this trace."""
    best_move: str | None
    job_steps: int
    projected_saving_hours: float
    projected_saving_gpu_hours: float
    projected_job_hours_static: float
    keep_split_because: str | None = None
    """Why no resize settings are advised (then every setting above is None)."""

    @property
    def keeps_split(self) -> bool:
        return self.keep_split_because is not None


@dataclass(frozen=True)
class BreakevenReport:
    current_allocation: str
    cost_s: float
    cost_source: str
    transitions: list[BreakEven]
    runs: ImbalanceRuns
    advice: Advice
    notes: list[str]
    assumed: tuple = ()
    """The `run_facts.AssumedFact`s of the analysis context: what the report depends on that
    nothing gave."""
    recorded: str = ""
    """How the recorded run ran, where that is not a split (a colocated run)."""
    warnings: tuple[str, ...] = ()
    """Costs used outside the range they were fitted on."""

    def transitions_frame(self) -> pd.DataFrame:
        return pd.DataFrame([t.__dict__ for t in self.transitions])


def analyse(
    *,
    steps: pd.DataFrame,
    steady_step_s: np.ndarray,
    candidates: tuple[Allocation, ...],
    current: Allocation,
    cost_s: float,
    cost_source: str,
    total_gpus: int,
    job_steps: int,
    imbalance_threshold: float = 0.1,
    confidence: float = 0.9,
    num_resamples: int = 2000,
    seed: int = 0,
    notes: list[str] | None = None,
) -> BreakevenReport:
    """Break-even of every transition and advice, from measured steps and modelled step times.

    `steady_step_s[k, c]` is the modelled time of step k on candidate c.
    """
    labels = [c.label for c in candidates]
    transitions = []
    for a, from_label in enumerate(labels):
        for b, to_label in enumerate(labels):
            if a != b:
                transitions.append(
                    transition_break_even(
                        from_label=from_label,
                        to_label=to_label,
                        cost_s=cost_s,
                        savings_s=steady_step_s[:, a] - steady_step_s[:, b],
                        confidence=confidence,
                        num_resamples=num_resamples,
                        seed=seed,
                    )
                )
    rollout_s = steps["rollout_s"].to_numpy(np.float64)
    train_s = steps["train_s"].to_numpy(np.float64)
    imbalance = signed_imbalance(rollout_s, train_s)
    runs = imbalance_runs(imbalance, imbalance_threshold)
    advice = _advise(
        transitions=transitions,
        labels=labels,
        candidates=candidates,
        current=current,
        steady_step_s=steady_step_s,
        imbalance=imbalance,
        runs=runs,
        cost_s=cost_s,
        total_gpus=total_gpus,
        job_steps=job_steps,
    )
    return BreakevenReport(
        current_allocation=current.label,
        cost_s=cost_s,
        cost_source=cost_source,
        transitions=transitions,
        runs=runs,
        advice=advice,
        notes=list(notes or []),
    )


def _paying_steps(transition: BreakEven) -> float:
    """The break-even of a move already known to repay itself."""
    assert transition.steps is not None, "only moves that repay themselves are ranked"
    return transition.steps


def _advise(
    *,
    transitions: list[BreakEven],
    labels: list[str],
    candidates: tuple[Allocation, ...],
    current: Allocation,
    steady_step_s: np.ndarray,
    imbalance: np.ndarray,
    runs: ImbalanceRuns,
    cost_s: float,
    total_gpus: int,
    job_steps: int,
) -> Advice:
    """Settings from the best move away from the current split only (a row the report always
    shows); when no move pays back, or no imbalance level makes one pay within the trace's typical
    imbalance run, the advice is to keep the split and no setting is given."""
    here = labels.index(current.label)
    from_here = [t for t in transitions if t.from_allocation == current.label and t.steps]
    best = min(from_here, key=_paying_steps) if from_here else None
    all_runs = runs.all_steps
    typical_run = float(np.median(all_runs)) if len(all_runs) else float(len(imbalance))
    up, down = _thresholds(
        candidates, here, steady_step_s, imbalance, cost_s=cost_s, horizon_steps=typical_run
    )
    static_step_s = float(np.mean(steady_step_s[:, here]))
    keep_because = None
    if best is None:
        keep_because = f"no move from {current.label} pays back on this trace"
    elif up is None and down is None:
        keep_because = (
            f"at no imbalance level does a one-notch move repay its {cost_s:.1f} s resize within "
            f"the trace's typical imbalance run ({typical_run:.0f} steps)"
        )
    if keep_because is not None:
        return Advice(
            cooldown_steps=None,
            dwell_steps=None,
            consecutive_signals=None,
            up_threshold=None,
            down_threshold=None,
            best_move=None if best is None else _move(best),
            job_steps=job_steps,
            projected_saving_hours=0.0,
            projected_saving_gpu_hours=0.0,
            projected_job_hours_static=job_steps * static_step_s / 3600,
            keep_split_because=keep_because,
        )
    assert best is not None
    break_even = _paying_steps(best)
    upper = best.ci_high_steps if best.ci_high_steps else 2 * break_even
    saved_s = max(0.0, job_steps * best.mean_saving_per_step_s - cost_s)
    return Advice(
        cooldown_steps=math.ceil(upper),
        dwell_steps=math.ceil(break_even),
        consecutive_signals=recommended_consecutive_signals(all_runs, break_even),
        up_threshold=up,
        down_threshold=down,
        best_move=_move(best),
        job_steps=job_steps,
        projected_saving_hours=saved_s / 3600,
        projected_saving_gpu_hours=saved_s / 3600 * total_gpus,
        projected_job_hours_static=job_steps * static_step_s / 3600,
    )


def _move(transition: BreakEven) -> str:
    return f"{transition.from_allocation} -> {transition.to_allocation}"


def _thresholds(
    candidates: tuple[Allocation, ...],
    here: int,
    steady_step_s: np.ndarray,
    imbalance: np.ndarray,
    *,
    cost_s: float,
    horizon_steps: float,
) -> tuple[float | None, float | None]:
    """Up and down thresholds: savings of moving one notch towards the bottleneck, step by
    step, from the current split."""
    by_train = sorted(range(len(candidates)), key=lambda i: candidates[i].train_gpus)
    position = by_train.index(here)
    more_rollout = by_train[position - 1] if position > 0 else None
    more_train = by_train[position + 1] if position + 1 < len(by_train) else None
    up = down = None
    if more_rollout is not None:
        rollout_bound = imbalance > 0
        up = recommended_threshold(
            imbalance[rollout_bound],
            (steady_step_s[:, here] - steady_step_s[:, more_rollout])[rollout_bound],
            cost_s=cost_s,
            horizon_steps=horizon_steps,
        )
    if more_train is not None:
        train_bound = imbalance < 0
        down = recommended_threshold(
            -imbalance[train_bound],
            (steady_step_s[:, here] - steady_step_s[:, more_train])[train_bound],
            cost_s=cost_s,
            horizon_steps=horizon_steps,
        )
    return up, down


def paper_break_even_steps() -> float:
    """The paper's break-even, from its own numbers (facts.md, Exp#3): about 11.8 steps."""
    steps = break_even_steps(PAPER_RESIZE_CRITICAL_S, PAPER_STEP_BEFORE_S - PAPER_STEP_AFTER_S)
    assert steps is not None
    return steps
