"""The offline-optimal resize schedule: a lower bound on total time that no policy can beat.

With the whole future known, choosing a candidate topology for every step is a shortest path
through a layered graph: layer k holds one node per candidate, a node costs that step's time on
that candidate, and an edge between candidates costs the resize between them. Dynamic
programming over steps finds it exactly in O(steps x candidates^2):

    best[0, c] = resize[initial, c] + step[0, c]
    best[k, c] = step[k, c] + min over p of (best[k-1, p] + resize[p, c])

The bound lives inside the additive model (a step's time depends only on its own topology, a
resize adds its cost once). An online policy, which cannot move before the first step and pays
the same costs, can only do worse; the twin's pipeline adds effects the model leaves out (overlap
of the first step with background phases), so the regret of a simulated policy is reported
against this bound, not guaranteed to be exactly non-negative to the last second.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._lazy import LazyModule
from .costs.rollout_kernels import numba_disabled

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = LazyModule("pandas")


@dataclass(frozen=True)
class OptimalSchedule:
    """The schedule the dynamic program found."""

    total_s: float
    """Sum of step times plus resize costs along the schedule (s)."""
    candidate_index: np.ndarray
    """Index of the candidate each step runs on (int64, one per step)."""
    step_s: np.ndarray
    """Time of each step on its chosen candidate (s)."""
    resize_s: float
    """Total time spent resizing (s)."""
    num_resizes: int
    """Number of changes of candidate, a move away from the initial one before step 0 included
    (none when the start is free)."""


ROUNDING_TOLERANCE = 1e-9
"""Relative gap below which a total and the optimum are the same schedule summed in another
order (the pipeline's clock, a column sum, the dynamic program): its regret is 0."""


@dataclass(frozen=True)
class Regret:
    """How far a policy's total time is from the offline optimum. The one definition that
    `run`, `replay` and `sweep` report."""

    policy_total_s: float
    optimal_total_s: float

    @property
    def regret_s(self) -> float:
        gap = self.policy_total_s - self.optimal_total_s
        if abs(gap) <= ROUNDING_TOLERANCE * max(abs(self.optimal_total_s), 1.0):
            return 0.0
        return gap

    @property
    def regret_fraction(self) -> float:
        """Regret as a share of the optimum (0.05 = 5% slower than the best possible)."""
        if self.optimal_total_s <= 0:
            return 0.0
        return self.regret_s / self.optimal_total_s


def _check_inputs(step_s: np.ndarray, resize_s: np.ndarray, initial_index: int | None) -> None:
    if step_s.ndim != 2:
        raise ValueError(
            f"step times must be a (steps, candidates) matrix, got shape {step_s.shape}"
        )
    num_candidates = step_s.shape[1]
    if num_candidates == 0:
        raise ValueError("there must be at least one candidate topology")
    if resize_s.shape != (num_candidates, num_candidates):
        raise ValueError(
            f"resize costs must be {num_candidates}x{num_candidates}, got shape {resize_s.shape}"
        )
    if not (np.all(np.isfinite(step_s)) and np.all(np.isfinite(resize_s))):
        raise ValueError("step times and resize costs must be finite")
    if np.any(step_s < 0) or np.any(resize_s < 0):
        raise ValueError("step times and resize costs must be non-negative")
    if initial_index is not None and not 0 <= initial_index < num_candidates:
        raise ValueError(f"initial_index {initial_index} is not among {num_candidates} candidates")


def offline_optimum(
    step_s: np.ndarray,
    resize_s: np.ndarray,
    *,
    initial_index: int | None,
    move_before_first_step: bool = False,
) -> OptimalSchedule:
    """Minimum-total-time schedule over steps x candidates, with resize costs.

    `step_s[k, c]` is the time of step k on candidate c; `resize_s[p, c]` the cost of moving from
    p to c (its diagonal is ignored: staying costs nothing). The schedule starts on
    `initial_index` and, like every policy (which first decides after step 0), keeps it for the
    first step unless `move_before_first_step`. `initial_index` None lets the schedule start on
    any candidate for free: a bound below every static split as well as every policy.
    Ties go to staying put, then to the lower index.
    """
    step_s = np.asarray(step_s, dtype=np.float64)
    resize_s = np.array(resize_s, dtype=np.float64)
    _check_inputs(step_s, resize_s, initial_index)
    np.fill_diagonal(resize_s, 0.0)
    num_steps, num_candidates = step_s.shape
    if num_steps == 0:
        return OptimalSchedule(0.0, np.zeros(0, np.int64), np.zeros(0), 0.0, 0)

    came_from = np.empty((num_steps, num_candidates), dtype=np.int64)
    if initial_index is None:
        came_from[0] = np.arange(num_candidates)
        best = step_s[0].copy()
    else:
        came_from[0] = initial_index
        best = resize_s[initial_index] + step_s[0]
    if initial_index is not None and not move_before_first_step:
        best = np.where(np.arange(num_candidates) == initial_index, step_s[0], np.inf)
    last = _forward(step_s, resize_s, best.tolist(), came_from)

    path = np.empty(num_steps, dtype=np.int64)
    path[-1] = int(np.argmin(last))
    for k in range(num_steps - 1, 0, -1):
        path[k - 1] = came_from[k, path[k]]
    start = int(path[0]) if initial_index is None else initial_index
    return _schedule_from_path(step_s, resize_s, start, path)


NUMBA_MIN_STEPS = 100_000
"""Steps from which the compiled forward pass is used (about 0.3 s of the Python loop a
hundred thousand steps on four candidates, against numba's load where no kernel of the run
loaded it yet); below, or with DYNARESIZE_NO_NUMBA=1, the Python loop."""


def _compiled(num_steps: int) -> bool:
    """Whether the forward pass of `num_steps` steps runs compiled (`NUMBA_MIN_STEPS`)."""
    if numba_disabled():
        return False
    return num_steps >= NUMBA_MIN_STEPS or "numba" in sys.modules


def _forward(
    step_s: np.ndarray, resize_s: np.ndarray, best: list[float], came_from: np.ndarray
) -> list[float]:
    """Steps 1.. of the dynamic program: fills `came_from[k]` and returns the last `best`.

    Compiled for a long run (`optimal_numba.forward`), else in Python floats over lists, row
    by row: with a handful of candidates, numpy's per-call cost is most of the work, and this
    loop is several times faster. Both do the same arithmetic and choices as the matrix form:
    `via[p] = best[p] + resize[p, c]`, the first smallest `via`, staying put when it ties
    (`best[c] <= via`), then the step's own time.
    """
    if _compiled(len(step_s)):
        from .optimal_numba import forward

        moves_into = np.ascontiguousarray(resize_s.T, dtype=np.float64)
        start = np.array(best, dtype=np.float64)
        return forward(np.ascontiguousarray(step_s), moves_into, start, came_from).tolist()
    candidates = range(len(best))
    into = [resize_s[:, c].tolist() for c in candidates]
    steps = step_s.tolist()
    for k in range(1, len(steps)):
        row = steps[k]
        came = [0] * len(best)
        reached = [0.0] * len(best)
        for c in candidates:
            costs = into[c]
            where, value = 0, best[0] + costs[0]
            for p in candidates:
                via = best[p] + costs[p]
                if via < value:
                    where, value = p, via
            if best[c] <= value:
                where, value = c, best[c] + costs[c]
            came[c] = where
            reached[c] = value + row[c]
        came_from[k] = came
        best = reached
    return best


def schedule_total_s(
    step_s: np.ndarray, resize_s: np.ndarray, *, initial_index: int, path: np.ndarray
) -> float:
    """Total time of a given schedule under the same additive model (for checks and regret)."""
    step_s = np.asarray(step_s, dtype=np.float64)
    resize_s = np.array(resize_s, dtype=np.float64)
    _check_inputs(step_s, resize_s, initial_index)
    np.fill_diagonal(resize_s, 0.0)
    return _schedule_from_path(step_s, resize_s, initial_index, np.asarray(path)).total_s


def _schedule_from_path(
    step_s: np.ndarray, resize_s: np.ndarray, initial_index: int, path: np.ndarray
) -> OptimalSchedule:
    if path.shape != (step_s.shape[0],):
        raise ValueError(f"a schedule needs one candidate per step, got shape {path.shape}")
    previous = np.concatenate([[initial_index], path[:-1]]).astype(np.int64)
    per_step = step_s[np.arange(len(path)), path]
    moves = resize_s[previous, path]
    total = float(per_step.sum() + moves.sum())
    return OptimalSchedule(
        total_s=total,
        candidate_index=path.astype(np.int64),
        step_s=per_step,
        resize_s=float(moves.sum()),
        num_resizes=int(np.count_nonzero(previous != path)),
    )


def best_static(step_s: np.ndarray) -> tuple[int, float]:
    """Index and total time of the best single candidate for the whole run (no resizes)."""
    totals = np.asarray(step_s, dtype=np.float64).sum(axis=0)
    index = int(np.argmin(totals))
    return index, float(totals[index])


def uniform_resize_matrix(num_candidates: int, cost_s: float) -> np.ndarray:
    """Every move costs `cost_s`, staying costs nothing (the twin's resize plan is per strategy,
    not per pair of splits)."""
    matrix = np.full((num_candidates, num_candidates), float(cost_s))
    np.fill_diagonal(matrix, 0.0)
    return matrix


def resize_matrix(candidates, plans) -> np.ndarray:
    """Critical path of every move between candidates (`twin.costs.resize.ResizePlans`); staying
    costs nothing."""
    return np.array(
        [
            [0.0 if a == b else plans.between(a, b).critical_s for b in candidates]
            for a in candidates
        ]
    )


def optimum_of_context(context, *, from_initial: bool = False) -> OptimalSchedule:
    """The offline optimum of a twin run's context (`twin.simulation.SimContext`).

    Uses the static step-time matrix the pipeline reads and, per move, only the resize's
    critical path: the stall every resize costs at least. Background work can only add to that.
    The start is free (`initial_index` None) unless `from_initial`: then the schedule keeps the
    configured initial split for the first step, as policies do. Either way, in the lockstep
    modes no policy simulated on the same context beats it; the free start also bounds every
    static split.
    """
    step_costs = context.step_costs
    initial = step_costs.index(context.config.cluster.initial_allocation) if from_initial else None
    resize_s = resize_matrix(step_costs.candidates, context.plans)
    return offline_optimum(step_costs.step_s, resize_s, initial_index=initial)


SCHEDULE_COLUMNS = ["kind", "step", "from_allocation", "to_allocation", "resize_s"]


def schedule_table(
    schedule: OptimalSchedule,
    candidates,
    *,
    steps: np.ndarray | None = None,
    resize_s: np.ndarray | None = None,
) -> pd.DataFrame:
    """The optimal schedule as rows a user can read beside a policy's decisions: a `start` row
    (the split step 0 runs on; `step` is that first step) and one `resize` row per move, whose
    `step` is the step after which it happens, as in decision records. `steps` are the step
    ids (default 0..n-1); `resize_s` the matrix the schedule was found with (its move costs)."""
    path = schedule.candidate_index
    if len(path) == 0:
        return pd.DataFrame(columns=SCHEDULE_COLUMNS)
    ids = np.arange(len(path)) if steps is None else np.asarray(steps)
    labels = [c.label for c in candidates]
    rows = [
        {
            "kind": "start",
            "step": int(ids[0]),
            "from_allocation": None,
            "to_allocation": labels[int(path[0])],
            "resize_s": 0.0,
        }
    ]
    for k in np.flatnonzero(path[1:] != path[:-1]) + 1:
        before, after = int(path[k - 1]), int(path[k])
        rows.append(
            {
                "kind": "resize",
                "step": int(ids[k - 1]),
                "from_allocation": labels[before],
                "to_allocation": labels[after],
                "resize_s": float(resize_s[before, after]) if resize_s is not None else np.nan,
            }
        )
    table = pd.DataFrame(rows, columns=SCHEDULE_COLUMNS)
    # the start comes from nowhere: None (JSON null), never a float NaN
    table["from_allocation"] = pd.Series(
        [r["from_allocation"] for r in rows], dtype=object, index=table.index
    )
    return table


def optimum_schedule_table(context, schedule: OptimalSchedule, steps=None) -> pd.DataFrame:
    """`schedule_table` of the optimum of a twin run's context (`optimum_of_context`)."""
    candidates = context.step_costs.candidates
    return schedule_table(
        schedule, candidates, steps=steps, resize_s=resize_matrix(candidates, context.plans)
    )
