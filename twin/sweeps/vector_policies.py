"""Policies decided for many runs at once: one array operation per step boundary.

A sweep evaluates a policy at many parameter values on one context (`lockstep`). Where a
policy's decision depends only on what it observes (the stage times of the step just completed,
the split, the steps since the last resize, the predicted step time of every candidate, and its
own state built from the same), its vectorised form below takes those as arrays over the runs,
with the parameters as arrays too, and answers with each run's target split (-1: hold).

Each form mirrors its policy in `dynaresize.policies` comparison for comparison and in the same
floating-point order, so the two decide alike at every boundary; tests/twin/test_sweep_batched.py
checks every registered kind. A kind without an entry in `VECTOR_POLICIES`, or a configuration
its form cannot take (a schedule naming a split that is not a candidate, whose error the policy
itself raises), runs through `simulate()` one run at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.moves import MoveMode
from dynaresize.policies.types import Allocation

from ..costs.resize import ResizePlans

TO_ROLLOUT, TO_TRAIN = 1, -1
"""Directions as numbers: rollout gains GPUs (rollout-bound) or training does; 0 is none."""


@dataclass(frozen=True)
class Boundary:
    """What every run of a batch observes at one step boundary (arrays over the runs)."""

    step: int
    remaining_steps: int
    current: np.ndarray
    """Candidate index of each run's split (the just-completed step ran on it)."""
    rollout_s: np.ndarray
    """Rollout time of the batch the just-completed step trained on."""
    train_s: np.ndarray
    """Training stage of the just-completed step."""
    steps_since_resize: np.ndarray
    """Completed steps since each run's last resize; -1 where it has not resized."""
    predicted_step_s: np.ndarray
    """(num_candidates,): the predicted steady step time on every candidate."""


class VectorDecider(Protocol):
    num_runs: int

    def decide(self, at: Boundary) -> np.ndarray:
        """Each run's target candidate index, or -1 to hold."""
        ...


class CandidateMoves:
    """The candidate splits and what moving between two of them costs, as index tables.

    Tables indexed by direction take TO_ROLLOUT (1) or TO_TRAIN (-1, Python's last row); row 0,
    no direction, holds no target.
    """

    def __init__(
        self, candidates: Sequence[Allocation], plans: ResizePlans, predicted_step_s: np.ndarray
    ) -> None:
        self.candidates = tuple(candidates)
        self.predicted_step_s = predicted_step_s
        """(num_steps, num_candidates), as the observations carry it."""
        c = len(self.candidates)
        self.train_gpus = np.array([a.train_gpus for a in self.candidates], dtype=np.int64)
        self.rollout_gpus = np.array([a.rollout_gpus for a in self.candidates], dtype=np.int64)
        self.critical_s = np.zeros((c, c))
        """(from, to): the stall of the move; 0 on the diagonal."""
        self.slowdown_s = np.zeros((c, c))
        self.background_tail_s = np.zeros((c, c))
        self.total_cost_s = np.zeros((c, c))
        """A candidate's `predicted_resize_total_s` as the observation computes it."""
        self.recorded = np.zeros((c, c), dtype=bool)
        """Whether the move leaves rows in the resize table (its plan has phases)."""
        for i, before in enumerate(self.candidates):
            for j, after in enumerate(self.candidates):
                if i != j:
                    plan = plans.between(before, after)
                    self.critical_s[i, j] = plan.critical_s
                    self.slowdown_s[i, j] = plan.slowdown_s
                    self.background_tail_s[i, j] = plan.background_tail_s
                    self.total_cost_s[i, j] = plan.critical_s + plan.slowdown_s
                    self.recorded[i, j] = bool(plan.phases)
        # `candidate_allocations()`: most training GPUs first, ties in candidate order
        order = sorted(range(c), key=lambda i: -self.candidates[i].train_gpus)
        self.towards: dict[tuple[int, int], list[int]] = {}
        """(direction, current) -> candidates strictly that way, nearest first (`moves.py`)."""
        for cur in range(c):
            gpus = self.train_gpus[cur]
            self.towards[TO_ROLLOUT, cur] = [i for i in order if self.train_gpus[i] < gpus]
            self.towards[TO_TRAIN, cur] = [i for i in reversed(order) if self.train_gpus[i] > gpus]
        self.nearest = np.full((3, c), -1)
        """(direction, current) -> `moves.one_notch`, -1 at the edge."""
        for (direction, cur), way in self.towards.items():
            self.nearest[direction, cur] = way[0] if way else -1
        self._best: np.ndarray | None = None

    def index(self, allocation: Allocation) -> int:
        return self.candidates.index(allocation)

    def _predicted_best(self) -> np.ndarray:
        """(num_steps, 3, num_candidates): `moves.predicted_best` at every step, from every
        split, in either direction (row TO_ROLLOUT or TO_TRAIN), -1 where nothing beats staying."""
        if self._best is None:
            predicted = self.predicted_step_s
            best = np.full((len(predicted), 3, len(self.candidates)), -1)
            for (direction, cur), way in self.towards.items():
                chosen = best[:, direction, cur]
                best_s = predicted[:, cur].copy()
                for cand in way:
                    faster = predicted[:, cand] < best_s
                    chosen[faster] = cand
                    best_s[faster] = predicted[faster, cand]
            self._best = best
        return self._best

    def target(
        self, direction: np.ndarray, current: np.ndarray, by_prediction: np.ndarray, step: int
    ) -> np.ndarray:
        """`moves.choose_target` for each run: one notch, or the predicted best where
        `by_prediction`; -1 where there is none (or no direction)."""
        out = self.nearest[direction, current]
        if by_prediction.any():
            best = self._predicted_best()[step, direction, current]
            out = np.where(by_prediction, best, out)
        return np.where(direction != 0, out, -1)


def _imbalance(rollout_s: np.ndarray, train_s: np.ndarray) -> np.ndarray:
    """`policies.signals.imbalance` of each run."""
    longer = np.maximum(rollout_s, train_s)
    positive = longer > 0.0
    out = np.zeros_like(longer)
    np.divide(rollout_s - train_s, longer, out=out, where=positive)
    return out


def _direction(signal: np.ndarray, up: Any, down: Any) -> np.ndarray:
    """TO_ROLLOUT where signal >= up, TO_TRAIN where signal <= -down, else 0."""
    return np.where(signal >= up, TO_ROLLOUT, np.where(signal <= -down, TO_TRAIN, 0))


def _param(configs: Sequence[Any], name: str, dtype: Any = np.float64) -> np.ndarray:
    return np.array([getattr(c, name) for c in configs], dtype=dtype)


def _by_prediction(configs: Sequence[Any]) -> np.ndarray:
    return np.array([c.move_mode is MoveMode.PREDICTED_BEST for c in configs])


class _Static:
    """`static`: holds."""

    def __init__(self, configs: Sequence[Any], moves: CandidateMoves) -> None:
        self.num_runs = len(configs)

    def decide(self, at: Boundary) -> np.ndarray:
        return np.full(self.num_runs, -1)


class _Scheduled:
    """`scheduled`: the listed split after the listed step, unless already on it."""

    def __init__(self, configs: Sequence[Any], moves: CandidateMoves) -> None:
        self.num_runs = len(configs)
        self.by_step: dict[int, np.ndarray] = {}
        for r, config in enumerate(configs):
            for entry in config.schedule:
                row = self.by_step.setdefault(entry.step, np.full(self.num_runs, -1))
                row[r] = moves.index(entry.allocation)

    def decide(self, at: Boundary) -> np.ndarray:
        row = self.by_step.get(at.step)
        if row is None:
            return np.full(self.num_runs, -1)
        return np.where(row == at.current, -1, row)


class _Greedy:
    """`greedy`: one move whenever the last step's imbalance leaves the deadband."""

    def __init__(self, configs: Sequence[Any], moves: CandidateMoves) -> None:
        self.num_runs = len(configs)
        self.moves = moves
        self.deadband = _param(configs, "deadband")
        self.by_prediction = _by_prediction(configs)

    def decide(self, at: Boundary) -> np.ndarray:
        signal = _imbalance(at.rollout_s, at.train_s)
        direction = np.sign(signal).astype(np.int64)
        direction[np.abs(signal) <= self.deadband] = 0
        return self.moves.target(direction, at.current, self.by_prediction, at.step)


class _Hysteresis:
    """`hysteresis`: the EWMA per split, cooldown, band, consecutive signals, dwell, target."""

    def __init__(self, configs: Sequence[Any], moves: CandidateMoves) -> None:
        n = self.num_runs = len(configs)
        self.moves = moves
        self.up = _param(configs, "up_threshold")
        self.down = _param(configs, "down_threshold")
        self.alpha = _param(configs, "smoothing_alpha")
        self.consecutive = _param(configs, "consecutive_signals", np.int64)
        self.dwell = _param(configs, "dwell_steps", np.int64)
        self.cooldown = _param(configs, "cooldown_steps", np.int64)
        self.by_prediction = _by_prediction(configs)
        self.smoothed = np.zeros(n)
        self.smoothed_on = np.full(n, -1)
        """The split the EWMA was seeded on; -1 after a restart."""
        self.streak_direction = np.zeros(n, dtype=np.int64)
        self.streak_count = np.zeros(n, dtype=np.int64)
        self.last_resize_step = np.full(n, -1)

    def decide(self, at: Boundary) -> np.ndarray:
        k, current = at.step, at.current
        sample = _imbalance(at.rollout_s, at.train_s)
        restart = self.smoothed_on != current
        blended = self.alpha * sample + (1.0 - self.alpha) * self.smoothed
        self.smoothed = np.where(restart, sample, blended)
        self.smoothed_on = current.copy()
        resized = self.last_resize_step >= 0
        cooling = resized & (self.cooldown - (k - self.last_resize_step) + 1 > 0)
        direction = _direction(self.smoothed, self.up, self.down)
        direction[cooling] = 0
        same = direction == self.streak_direction
        self.streak_count = np.where(direction == 0, 0, np.where(same, self.streak_count + 1, 1))
        self.streak_direction = direction
        on_split = np.where(at.steps_since_resize >= 0, at.steps_since_resize, k + 1)
        ready = (direction != 0) & (self.streak_count >= self.consecutive)
        ready &= on_split >= self.dwell
        target = self.moves.target(np.where(ready, direction, 0), current, self.by_prediction, k)
        moving = target >= 0
        self.last_resize_step[moving] = k
        self.streak_direction[moving] = 0
        self.streak_count[moving] = 0
        self.smoothed_on[moving] = -1
        return target


class _Payback:
    """`payback`: the candidate with the largest net gain over the horizon, if it repays."""

    def __init__(self, configs: Sequence[Any], moves: CandidateMoves) -> None:
        self.num_runs = len(configs)
        self.moves = moves
        self.horizon = _param(configs, "horizon_steps", np.int64)
        self.margin = _param(configs, "margin")
        self.cap = _param(configs, "cap_horizon_at_remaining_steps", bool)

    def decide(self, at: Boundary) -> np.ndarray:
        moves, current = self.moves, at.current
        horizon = np.where(self.cap, np.minimum(self.horizon, at.remaining_steps), self.horizon)
        stay_s = at.predicted_step_s[current]
        best = np.full(self.num_runs, -1)
        best_net = np.zeros(self.num_runs)
        best_gpus = np.zeros(self.num_runs, dtype=np.int64)
        for cand in range(len(moves.candidates)):
            saving_s = (stay_s - at.predicted_step_s[cand]) * horizon
            cost_s = moves.total_cost_s[current, cand]
            admitted = (current != cand) & ~((saving_s <= 0.0) | (saving_s < cost_s * self.margin))
            net_s = saving_s - cost_s
            gpus = -np.abs(moves.train_gpus[cand] - moves.train_gpus[current])
            better = (best < 0) | (net_s > best_net) | ((net_s == best_net) & (gpus > best_gpus))
            take = admitted & better
            best[take], best_net[take], best_gpus[take] = cand, net_s[take], gpus[take]
        best[horizon <= 0] = -1
        return best


def _scheduled_fits(configs: Sequence[Any], moves: CandidateMoves) -> bool:
    """A schedule naming a split outside the candidates is the policy's own error to raise."""
    return all(e.allocation in moves.candidates for c in configs for e in c.schedule)


VECTOR_POLICIES: dict[str, Callable[[Sequence[Any], CandidateMoves], VectorDecider]] = {
    "static": _Static,
    "scheduled": _Scheduled,
    "greedy": _Greedy,
    "hysteresis": _Hysteresis,
    "payback": _Payback,
}
"""kind -> the vectorised form of its policy."""

_FITS: dict[str, Callable[[Sequence[Any], CandidateMoves], bool]] = {
    "scheduled": _scheduled_fits,
}


def vector_decider(
    configs: Sequence[PolicyConfigBase], moves: CandidateMoves
) -> VectorDecider | None:
    """The vectorised form for runs of one policy kind, or None where there is none."""
    kinds = {str(c.kind) for c in configs}
    if len(kinds) != 1:
        raise ValueError(f"one policy kind per batch, got {sorted(kinds)}")
    (kind,) = kinds
    build = VECTOR_POLICIES.get(kind)
    fits = _FITS.get(kind)
    if build is None or (fits is not None and not fits(configs, moves)):
        return None
    return build(configs, moves)
