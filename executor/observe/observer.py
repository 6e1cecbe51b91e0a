"""What the policy sees of a live run, kept up to date as the run goes.

The session reports each step's record and each resize's measured critical path; at a step
boundary it asks for the `StepObservation` the policy decides on. That observation is the one
the twin builds: the recent stage times, the per-candidate predictions (`estimates.py`) with
their resize costs (measured ones first, `cost_feedback.py`), how long ago the last resize was,
the steps left and the resizes measured so far. Until a resize is measured its cost is the
run's prior: the twin's calibrated model with `--costs`, else the setup's own timings
(`setup_prior.py`); the first measured resize says how far that prior was (`resize_prior.json`,
and the next decision record's `prior_over_measured`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from dynaresize.policies.types import Allocation, StageTimes, StepObservation
from dynaresize.traces.schema import StepRecord
from dynaresize.twin.config import ScenarioConfig

from ..batch import RolloutBatch
from ..config import LiveConfig
from .cost_feedback import ResizeCostFeedback
from .estimates import CandidateEstimator
from .setup_prior import SOURCE as PRIOR_SOURCE
from .setup_prior import prior_from_setup, prior_over_measured, write_prior_check


class Observer:
    """The run's measurements as the policy sees them, and the estimates built on them."""

    def __init__(
        self,
        live: LiveConfig,
        *,
        num_params: int,
        setup_timings_s: dict[str, float],
        setup_parts: Sequence[str],
        costs_path: Path | None,
        scenario: ScenarioConfig | None,
    ) -> None:
        """`setup_parts`: the setup parts the run's resize strategy repeats (its prior, unless
        `costs_path` gives calibrated cost models); `scenario`: the twin's description of the
        same cluster and model, if given."""
        self.live = live
        self.estimator = CandidateEstimator.for_run(
            live,
            num_params=num_params,
            strategy=live.resize_strategy,
            costs_path=costs_path,
            scenario=scenario,
        )
        prior = None if costs_path else prior_from_setup(setup_parts, setup_timings_s)
        self.prior_s = prior.critical_s if prior else self.estimator.model_critical_s
        """The resize cost every candidate move is priced at before a resize is measured."""
        self.prior_source = PRIOR_SOURCE if prior else self.estimator.model_source.value
        self.cost_feedback = ResizeCostFeedback(
            fallback_critical_s=self.prior_s,
            fallback_background_s=self.estimator.model_background_s,
            fallback_source=self.estimator.model_source,
            fallback_replaces=prior is not None,
        )
        self.recent: deque[StageTimes] = deque(maxlen=live.recent_window_steps)
        self.measured_resize_s: deque[float] = deque(maxlen=live.measured_resize_costs_window)
        """The most recent measured critical paths (bounded: the observation copies them)."""
        self.steps_since_resize: int | None = None
        self.prior_check: float | None = None
        """The first resize's prediction over its measurement, for the next decision record."""

    @property
    def prior_note(self) -> str:
        """The trace's note on the prior."""
        return f"resize_prior_s={self.prior_s:.3f} ({self.prior_source})"

    def step_recorded(self, record: StepRecord, allocation: Allocation) -> None:
        """A step ended on `allocation` with this record."""
        self.cost_feedback.observe_step_record(record)
        self.recent.append(
            StageTimes(
                step=record.step,
                allocation=allocation,
                rollout_s=record.rollout_s,
                train_s=record.train_s,
                sync_s=record.sync_s,
                step_s=record.step_s,
            )
        )

    def observation(
        self,
        step: int,
        *,
        clock: Callable[[], float],
        current: Allocation,
        last_batch: RolloutBatch,
    ) -> StepObservation:
        """What the policy decides on at the boundary after `step` (one call per boundary),
        stamped with the run's `clock` once the predictions are made."""
        if self.steps_since_resize is not None:
            self.steps_since_resize += 1
        candidates = self.estimator.predict(
            current=current,
            recent=tuple(self.recent),
            measured_resize_s=tuple(self.measured_resize_s),
            last_batch=last_batch,
        )
        return StepObservation(
            step=step,
            now_s=clock(),
            allocation=current,
            recent=tuple(self.recent),
            candidates=self.cost_feedback.with_costs(candidates, current=current),
            steps_since_resize=self.steps_since_resize,
            remaining_steps=self.live.num_steps - step - 1,
            measured_resize_costs_s=tuple(self.measured_resize_s),
        )

    def take_prior_check(self) -> float | None:
        """`prior_over_measured` for the decision record now written (once, then None)."""
        check, self.prior_check = self.prior_check, None
        return check

    def resized(self, critical_s: float, *, predicted_s: float, out: Path) -> None:
        """A resize took `critical_s` on the critical path; the policy was told `predicted_s`.
        The first one also writes how far the prior was (`resize_prior.json` in `out`)."""
        if not self.measured_resize_s:
            write_prior_check(
                out, prior_s=self.prior_s, source=self.prior_source, first_measured_s=critical_s
            )
            self.prior_check = prior_over_measured(predicted_s, critical_s)
        self.measured_resize_s.append(critical_s)
        self.steps_since_resize = 0
