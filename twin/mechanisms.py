"""Mechanisms side by side: would moving GPUs pay on this job, which way, and by how much?

On one workload and one context, the ways GPUs may move between the roles, each with the policy
a user of it runs and with the best it could do knowing the future:

- the best static split (no moves);
- step-boundary resizes: hysteresis (the paper's controller), whole splits between steps;
- lending: veRL's rule (`verl_drc`) lends the trainers' GPUs within a step, the split unchanged;
- lending plus step-boundary resizes: hysteresis, which may do both;
- the offline optimum of each: the resize schedule of `twin.optimal` (free start); lending at
  exactly the waits, and until exactly the share of the batch, that let training start earliest
  (knowing every sample's length; `lend_wait.clairvoyant_lend`), on the best split for it; and
  the best resize schedule over those lending runs' step times. The lending optima choose wait
  by wait: a bound on every gate that does the same, not a proof across waits.

The policies take their settings from the scenario's own `hysteresis` and `verl_drc` entries
where it has them. The summary names the winner among the runnable mechanisms, its margin over
the best static split and the runner-up, and the switch costs that decided it: a resize's
critical path and a lend's activate plus deactivate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.registry import parse_policy_config

from .config import ScenarioConfig
from .optimal import offline_optimum, optimum_of_context, resize_matrix
from .simulation import SimContext, SimResult, simulate

__all__ = [
    "MECHANISM_COLUMNS",
    "MechanismComparison",
    "compare_mechanisms",
    "plot_comparison",
    "write_mechanisms",
]

MECHANISM_COLUMNS = [
    "mechanism",
    "kind",
    "policy",
    "total_s",
    "change_vs_best_static",
    "num_resizes",
    "num_lends",
]

STATIC = "best static split"
RESIZES = "step-boundary resizes"
LENDING = "lending"
BOTH = "lending + step-boundary resizes"


@dataclass(frozen=True)
class MechanismComparison:
    table: pd.DataFrame
    """MECHANISM_COLUMNS: one row per mechanism as run, then one per offline optimum."""
    runs: dict[str, SimResult]
    """The simulated mechanisms by name."""
    summary: list[str]
    """Which mechanism wins and by how much, and the switch costs that decided it."""


def _configured(config: ScenarioConfig, kind: str, **defaults) -> PolicyConfigBase:
    """The scenario's own entry of a policy kind, else one with the given settings."""
    for policy in config.policies:
        if policy.kind == kind:
            return policy
    return parse_policy_config({"kind": kind, **defaults})


def _with_pipeline(config: ScenarioConfig, *, lending: bool, **update) -> ScenarioConfig:
    """The scenario with lending on (and partial rollouts, which it needs) or off."""
    pipeline = config.pipeline
    if lending:
        fields = {"lending": True, "partial_rollout": True}
    else:
        async_partial = pipeline.partial_rollout and pipeline.mode.value == "async"
        fields = {"lending": False, "partial_rollout": async_partial}
    values = {**pipeline.model_dump(), **fields}
    if fields["partial_rollout"]:
        values.pop("in_flight", None)
    new_pipeline = type(pipeline).model_validate(values)
    return config.model_copy(update={"pipeline": new_pipeline, **update})


def _lending_bound_runs(config: ScenarioConfig, context: SimContext) -> dict[str, SimResult]:
    """Clairvoyant lending, held on each split."""
    runs = {}
    for allocation in context.step_costs.candidates:
        cluster = config.cluster.model_copy(update={"initial_allocation": allocation})
        on_split = config.model_copy(update={"cluster": cluster})
        runs[allocation.label] = simulate(
            on_split, {"kind": "static"}, context=context, clairvoyant_lending=True
        )
    return runs


def _row(mechanism: str, kind: str, policy: str, total_s: float, resizes: int, lends: int):
    return {
        "mechanism": mechanism,
        "kind": kind,
        "policy": policy,
        "total_s": total_s,
        "num_resizes": resizes,
        "num_lends": lends,
    }


def _lends(result: SimResult) -> int:
    return int((result.steps["lent_gpus"].fillna(0) > 0).sum())


def compare_mechanisms(config: ScenarioConfig, context: SimContext) -> MechanismComparison:
    """Every mechanism on the context's workload (see the module doc)."""
    resizing = _configured(config, "hysteresis")
    verl = _configured(config, "verl_drc")
    plain = _with_pipeline(config, lending=False)
    lending = _with_pipeline(config, lending=True)
    runs = {
        RESIZES: simulate(plain, resizing, context=context),
        LENDING: simulate(lending, verl, context=context),
        BOTH: simulate(lending, resizing, context=context),
    }
    baselines = context.baselines
    start = config.cluster.initial_allocation.label
    runs = {f"{name} from {start}": result for name, result in runs.items()}
    rows = [
        _row(
            f"{STATIC} ({baselines.best_allocation})", "run", "static", baselines.best_total_s, 0, 0
        )
    ]
    for (name, result), policy in zip(runs.items(), (resizing, verl, resizing), strict=True):
        s = result.summary
        rows.append(_row(name, "run", policy.kind, s.total_s, s.num_resizes, _lends(result)))

    resize_optimum = optimum_of_context(context)
    rows.append(
        _row(RESIZES, "offline optimum", "", resize_optimum.total_s, resize_optimum.num_resizes, 0)
    )
    bound_runs = _lending_bound_runs(lending, context)
    best_split = min(bound_runs, key=lambda label: bound_runs[label].summary.total_s)
    best_bound = bound_runs[best_split]
    rows.append(
        _row(
            f"{LENDING} ({best_split})",
            "offline optimum",
            "",
            best_bound.summary.total_s,
            0,
            _lends(best_bound),
        )
    )
    candidates = context.step_costs.candidates
    step_s = np.column_stack([bound_runs[c.label].steps["step_s"].to_numpy() for c in candidates])
    both_optimum = offline_optimum(
        step_s, resize_matrix(candidates, context.plans), initial_index=None
    )
    lent = np.column_stack(
        [bound_runs[c.label].steps["lent_gpus"].to_numpy() > 0 for c in candidates]
    )
    both_lends = int(lent[np.arange(len(lent)), both_optimum.candidate_index].sum())
    rows.append(
        _row(
            BOTH, "offline optimum", "", both_optimum.total_s, both_optimum.num_resizes, both_lends
        )
    )
    table = pd.DataFrame(rows)
    table["change_vs_best_static"] = table["total_s"] / baselines.best_total_s - 1.0
    table = table[MECHANISM_COLUMNS]
    lines = _summary(table, context, runs)
    start_total = baselines.totals_s[start]
    lending_s = runs[f"{LENDING} from {start}"].summary.total_s
    lines.insert(
        2,
        f"on {start}, the split the job runs: lending ({verl.kind}) takes "
        f"{_more_or_less(lending_s / start_total - 1.0)} than staying static there; lending at "
        "the clairvoyant waits takes "
        f"{_more_or_less(bound_runs[start].summary.total_s / start_total - 1.0)}",
    )
    return MechanismComparison(table, runs, lines)


def _more_or_less(change: float) -> str:
    return f"{abs(change):.1%} {'less' if change < 0 else 'more'} time"


def _summary(table: pd.DataFrame, context: SimContext, runs: dict[str, SimResult]) -> list[str]:
    ran = table[table["kind"] == "run"].sort_values("total_s", kind="stable")
    winner, runner_up = ran.iloc[0], ran.iloc[1]
    margin = 1.0 - winner["total_s"] / runner_up["total_s"]
    if winner["change_vs_best_static"] < 0:
        verdict = (
            f"{winner['mechanism']} wins: {winner['total_s'] / 3600:.3f} h, "
            f"{-winner['change_vs_best_static']:.1%} less time than the best static split"
        )
    else:
        verdict = f"{winner['mechanism']} wins: no mechanism beats it"
    if margin < 5e-4:
        second = f"{runner_up['mechanism']} ties with it (the same moves, or none)"
    else:
        second = f"runner-up {runner_up['mechanism']}, {margin:.1%} behind"
    lines = [verdict, second]
    resize = context.plan
    lend = context.lend_plan
    lines.append(
        f"switch costs: a step-boundary resize stalls {resize.critical_s:.1f} s (critical "
        f"path, the costlier direction), a lend costs {lend.switch_s:.1f} s (activate "
        f"{lend.activate_s:.1f} s + deactivate {lend.deactivate_s:.1f} s) within a step"
    )
    saved = [
        f"{name}: {r.summary.num_resizes} resizes, {_lends(r)} lends" for name, r in runs.items()
    ]
    lines.append("moves made: " + "; ".join(saved))
    return lines


def plot_comparison(comparison: MechanismComparison, *, title: str):
    """The comparison's figure (twin.plots.plot_mechanisms), the best static split's steps
    beside the runs'."""
    from .plots import plot_mechanisms  # matplotlib: on the first picture only

    steps = {name: run.steps[["step", "step_s"]] for name, run in comparison.runs.items()}
    return plot_mechanisms(comparison.table, steps, title=title)


def write_mechanisms(comparison: MechanismComparison, folder, *, title: str) -> None:
    """mechanisms.csv, mechanisms.json (table and summary) and mechanisms.png into `folder`."""
    import json
    from pathlib import Path

    folder = Path(folder)
    comparison.table.to_csv(folder / "mechanisms.csv", index=False)
    document = {
        "table": comparison.table.to_dict(orient="records"),
        "summary": comparison.summary,
    }
    (folder / "mechanisms.json").write_text(json.dumps(document, indent=2) + "\n")
    plot_comparison(comparison, title=title).savefig(folder / "mechanisms.png", dpi=100)
