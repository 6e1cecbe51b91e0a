"""`simulate()`: one policy over one scenario, from config to record tables and a summary.

The expensive part (every stage time of the workload on every candidate split) is computed once
into a `SimContext` and shared: comparing several policies on the same workload and seed builds
the context once and calls `simulate(..., context=ctx)` per policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.registry import build_policy
from dynaresize.policies.types import Policy
from dynaresize.traces.synthetic import generate_workload, workload_blocks
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream

from . import block_costs
from ._lazy import LazyModule
from .baselines import StaticBaselines, static_baselines
from .collector import full_collections_held
from .config import ScenarioConfig
from .context_cache import cache_get, cache_put, context_key
from .costs import CostModels
from .costs.lend import LendPlan, plan_lend
from .costs.resize import ResizePlan, ResizePlans, plan_resizes
from .pipeline_run import Intervals, PipelineRun
from .pipeline_runner import run_pipeline
from .sim_records import (
    DECISION_COLUMNS,
    RESIZE_COLUMNS,
    _frame,
    _samples_frame,
    _steps_frame,
)
from .step_costs import (
    StepCosts,
    steady_step_s_without_warmup,
)
from .summary import SimSummary, summarize_run

if TYPE_CHECKING:
    import pandas as pd

    from .sample_pipeline import SampleInputs
else:
    pd = LazyModule("pandas")

__all__ = ["SimContext", "SimResult", "build_context", "simulate"]


@dataclass(frozen=True)
class SimContext:
    """Everything about a scenario that does not depend on the policy.

    A generated workload too large to hold whole cheaply (more than one block of
    `workload_blocks`) in a run that reads only step-level costs is not held: its step costs
    and statistics were built a block at a time, and `workload` draws it again from its seed
    when a caller asks for the per-sample lengths (`workload_blocks` gives them a block at a
    time with the memory of one block).
    """

    config: ScenarioConfig
    held_workload: Workload | None
    """The per-sample lengths, or None where they are drawn again on demand (see above)."""
    costs: CostModels
    step_costs: StepCosts
    plans: ResizePlans
    predicted_step_s: np.ndarray
    """(num_steps, num_candidates): predicted steady step time after each step, from the last
    `observation_window_steps` batches only (no look-ahead)."""
    step_stats: pd.DataFrame
    baselines: StaticBaselines
    lend_plan: LendPlan
    """What one lend within a step costs (activate, deactivate)."""
    seed: int = 0
    """The seed a generated workload was drawn from."""
    streamed_workload: WorkloadStream | None = None
    """A trace's workload left in its samples file, read again a block at a time when asked."""

    @property
    def workload(self) -> Workload:
        """Every sample's lengths: the held ones, or read or drawn again whole."""
        if self.held_workload is not None:
            return self.held_workload
        if self.streamed_workload is not None:
            return self.streamed_workload.held()
        return generate_workload(self.config.workload, self.config.simulation.num_steps, self.seed)

    def workload_blocks(self, block_samples: int | None = None) -> Iterator[tuple[int, Workload]]:
        """The workload a block of whole steps at a time: (first step, block); blocks of about
        `block_samples` samples (default: the context's) where it is not held."""
        if self.held_workload is not None:
            yield 0, self.held_workload
            return
        if self.streamed_workload is not None:
            yield from self.streamed_workload.blocks(
                block_samples or block_costs.CONTEXT_BLOCK_SAMPLES
            )
            return
        yield from workload_blocks(
            self.config.workload,
            self.config.simulation.num_steps,
            self.seed,
            block_samples=block_samples or block_costs.CONTEXT_BLOCK_SAMPLES,
        )

    @property
    def num_samples(self) -> int:
        """Samples over every step, held or not."""
        if self.held_workload is not None:
            return len(self.held_workload.response_tokens)
        if self.streamed_workload is not None:
            return self.streamed_workload.num_samples
        return self.config.simulation.num_steps * self.config.workload.samples_per_step

    @property
    def plan(self) -> ResizePlan:
        """The costlier direction's plan, whole state moved (see `ResizePlans.costlier`)."""
        return self.plans.costlier


@dataclass(frozen=True)
class SimResult:
    steps: pd.DataFrame
    """One row per step; columns are exactly the fields of traces.schema.StepRecord."""
    resizes: pd.DataFrame
    """One row per resize phase; columns are the fields of ResizePhaseRecord."""
    decisions: pd.DataFrame
    """One row per policy call; columns are the fields of DecisionRecord."""
    summary: SimSummary
    context: SimContext
    samples: pd.DataFrame | None = None
    """Where the pipeline ran sample by sample (lending, partial rollout): one row per sample,
    the fields of SampleRecord with `finish_s` and `num_resumes`; None elsewhere."""


def _window_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean over the last `window` rows up to and including each row (fewer at the start)."""
    cum = np.cumsum(values, axis=0)
    out = cum.copy()
    out[window:] = cum[window:] - cum[:-window]
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return out / counts[:, None]


_STAGE_INPUTS = {
    "rollout_s": "costs.rollout, the workload's lengths and cluster.rollout_tensor_parallel_size",
    "train_s": "costs.train, model and the workload's tokens",
    "sync_s": "costs.sync, model.num_params_b and the cluster's bandwidths",
    "step_s": "the stage costs together",
}


def _require_finite(step_costs: StepCosts) -> None:
    """Inputs are bounded where they are read (twin/costs/bounds.py); should a combination of
    them still overflow, say which stage and which inputs, not a summary figure later on."""
    from dynaresize.config_io import ConfigError

    for stage, inputs in _STAGE_INPUTS.items():
        values = getattr(step_costs, stage)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            raise ConfigError(
                f"the {stage.removesuffix('_s')} time is not finite ({values.flat[bad[0]]}) at "
                f"{len(bad)} place(s); it comes from {inputs}: one of them is too large or "
                "too small"
            )


def build_context(
    config: ScenarioConfig,
    *,
    workload: Workload | WorkloadStream | None = None,
    costs: CostModels | None = None,
    seed: int | None = None,
    block_sink: block_costs.BlockSink | None = None,
) -> SimContext:
    """Generate (or take) the workload and compute every policy-independent quantity.

    The context of a generated workload is kept per process (`context_cache`): asked again for
    the same scenario, costs and seed, this returns the kept one, its arrays read-only.
    `block_sink` is called with every block of the workload, in order, where the context is
    built here (not where it is the kept one).
    """
    key = None
    if seed is None:
        seed = config.simulation.seed
    if workload is None:
        # The config's dump holds its own costs: other costs only add to the key. (A digest
        # kept per config object would go stale: configs are mutable models a notebook may
        # change in place between calls. The dump takes about 0.2 ms.)
        key = context_key(
            config.model_dump_json(exclude={"policies"}),
            "" if costs is None or costs is config.costs else costs.model_dump_json(),
            seed,
        )
        kept = cache_get(key)
        if kept is not None:
            return kept if kept.config is config else replace(kept, config=config)
    context = _build_context(
        config, workload=workload, costs=costs, seed=seed, block_sink=block_sink
    )
    cache_put(key, context, context.num_samples)
    return context


def _build_context(
    config: ScenarioConfig,
    *,
    workload: Workload | WorkloadStream | None,
    costs: CostModels | None,
    seed: int,
    block_sink: block_costs.BlockSink | None = None,
) -> SimContext:
    costs = costs or config.costs
    streamed = workload if isinstance(workload, WorkloadStream) else None
    if workload is None:
        num_samples = config.simulation.num_steps * config.workload.samples_per_step
        if block_costs.holds_samples(config) or num_samples <= block_costs.CONTEXT_BLOCK_SAMPLES:
            workload = generate_workload(config.workload, config.simulation.num_steps, seed)
    cluster = config.cluster
    step_costs, tokens, stats = block_costs.step_costs_by_block(
        config, costs, workload, seed, block_sink=block_sink
    )
    _require_finite(step_costs)
    plans = plan_resizes(
        strategy=config.pipeline.resize_strategy,
        model=config.model,
        params=costs.resize,
        host_bandwidth_gbps=cluster.host_bandwidth_gbps,
        interconnect_bandwidth_gbps=cluster.weight_sync_bandwidth_gbps(),
        workers_per_node=cluster.gpus_per_node,
    )
    steady = steady_step_s_without_warmup(step_costs, costs, config.pipeline.mode)
    predicted = _window_mean(steady, config.simulation.observation_window_steps)
    lend = plan_lend(
        model=config.model,
        params=costs.resize,
        tensor_parallel_size=cluster.rollout_tensor_parallel_size,
        host_bandwidth_gbps=cluster.host_bandwidth_gbps,
        interconnect_bandwidth_gbps=cluster.weight_sync_bandwidth_gbps(),
    )
    return SimContext(
        config=config,
        held_workload=workload if isinstance(workload, Workload) else None,
        costs=costs,
        step_costs=step_costs,
        plans=plans,
        predicted_step_s=predicted,
        step_stats=stats,
        baselines=static_baselines(step_costs, tokens),
        lend_plan=lend,
        seed=seed,
        streamed_workload=streamed,
    )


def _policy_name(policy: object) -> str:
    config = getattr(policy, "config", policy)
    return str(getattr(config, "kind", type(policy).__name__))


def _sample_inputs(
    config: ScenarioConfig, ctx: SimContext, *, clairvoyant_lending: bool
) -> SampleInputs | None:
    """What a lending or partial-rollout run reads beyond the matrices; None for the others."""
    if not (config.pipeline.lending or config.pipeline.partial_rollout):
        return None
    from .sample_pipeline import SampleInputs

    step_costs, window = ctx.step_costs, config.simulation.observation_window_steps
    rollout_s, train_s = step_costs.rollout_s.copy(), step_costs.train_s.copy()
    if len(rollout_s):  # the one-time warm-up says nothing about later batches
        rollout_s[0] -= ctx.costs.rollout.first_step_warmup_s
        train_s[0] -= ctx.costs.train.first_step_warmup_s
    return SampleInputs(
        workload=ctx.workload,
        rollout=ctx.costs.rollout,
        tensor_parallel_size=config.cluster.rollout_tensor_parallel_size,
        lend=ctx.lend_plan,
        predicted_rollout_s=_window_mean(rollout_s, window),
        predicted_train_s=_window_mean(train_s, window),
        clairvoyant_lending=clairvoyant_lending,
    )


def simulate(
    config: ScenarioConfig,
    policy_config_or_object: PolicyConfigBase | Policy | dict,
    *,
    workload: Workload | None = None,
    costs: CostModels | None = None,
    seed: int | None = None,
    context: SimContext | None = None,
    clairvoyant_lending: bool = False,
    phase_rows: bool = True,
) -> SimResult:
    """Run one policy over the scenario and return its records and summary.

    A policy config (or mapping) is built into a fresh policy; a policy object is reset first,
    so a run never inherits state from an earlier one. Pass `context` (from `build_context`) to
    reuse one workload's stage times across policies; `workload`, `costs` and `seed` are then
    ignored. `clairvoyant_lending` (with `pipeline.lending`) lends at every wait as knowing
    every sample's length says lets training start earliest, whatever the policy says: the
    offline bound of lending. `phase_rows` False keeps one row per resize in `resizes` (its
    first phase: what the summary reads), not one per phase.
    """
    ctx = context or build_context(config, workload=workload, costs=costs, seed=seed)
    if isinstance(policy_config_or_object, (PolicyConfigBase, dict)):
        policy = build_policy(policy_config_or_object)
    else:
        policy = policy_config_or_object
        policy.reset()
    name = _policy_name(policy)
    with full_collections_held():
        return _simulate(
            config,
            policy,
            name,
            ctx,
            clairvoyant_lending=clairvoyant_lending,
            phase_rows=phase_rows,
        )


def _simulate(
    config: ScenarioConfig,
    policy: Policy,
    name: str,
    ctx: SimContext,
    *,
    clairvoyant_lending: bool,
    phase_rows: bool = True,
) -> SimResult:
    records = run_pipeline(
        PipelineRun(
            costs=ctx.step_costs,
            policy=policy,
            policy_name=name,
            pipeline=config.pipeline,
            initial=config.cluster.initial_allocation,
            plans=ctx.plans,
            predicted_step_s=ctx.predicted_step_s,
            observation_window_steps=config.simulation.observation_window_steps,
            cost_source=ctx.costs.cost_source,
            measured_costs_window=config.simulation.measured_resize_costs_window,
            samples=_sample_inputs(config, ctx, clairvoyant_lending=clairvoyant_lending),
            phase_rows=phase_rows,
        )
    )
    # Each table, once built, lets go of the records it was built from: at a million steps
    # they hold more memory than the tables themselves.
    decision_columns: dict[str, list | np.ndarray] = dict(records.decisions)
    if "lend" not in decision_columns:  # a run that could not lend lent nothing
        # Given before the frame is built: a column replaced in a built frame costs a copy.
        num_rows = len(next(iter(decision_columns.values()))) if decision_columns else 0
        decision_columns["lend"] = np.zeros(num_rows, dtype=bool)
    steps = _steps_frame(records, ctx.step_stats)
    records.steps, records.train_intervals, records.rollout_intervals = {}, Intervals(), Intervals()
    resizes = _frame(records.resizes, RESIZE_COLUMNS)
    records.resizes = {}
    decisions = _frame(decision_columns, DECISION_COLUMNS, ints=("resize_id",))
    records.decisions = {}
    del decision_columns
    base = config.simulation.baseline_allocation
    summary = summarize_run(
        policy=name,
        steps=steps,
        resizes=resizes,
        total_s=records.end_s,
        stall_s=records.stall_s,
        total_gpus=config.cluster.total_gpus,
        thrash_window_steps=config.simulation.thrash_window_steps,
        static_totals_s=ctx.baselines.totals_s,
        baseline_allocation=None if base is None else base.label,
    )
    return SimResult(
        steps=steps,
        resizes=resizes,
        decisions=decisions,
        summary=summary,
        context=ctx,
        samples=None if records.samples is None else _samples_frame(records, ctx.workload),
    )
