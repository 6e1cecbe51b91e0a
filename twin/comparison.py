"""`run --mode sim` behind the command line: several policies, one workload, one table.

Every policy runs on the same workload, seed and stage times (one `SimContext`), so their rows in
the comparison differ only by the decisions they made. The table also holds every static split,
read off the step-time matrix, with the best one marked, and gives every row's regret against the
offline-optimal schedule of that context (twin.optimal), computed once and shared by all rows.
Outputs are written to a staging folder next to the destination and renamed into place only once
complete: an error leaves nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dynaresize.config_io import ConfigError
from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.registry import build_policy
from dynaresize.traces.chrome_trace import CHROME_TRACE_MAX_STEPS, write_chrome_trace
from dynaresize.traces.schema import RunMeta
from dynaresize.traces.staged_dir import staged_dir
from dynaresize.traces.workload import Workload

from .config import ScenarioConfig
from .optimal import OptimalSchedule, Regret, optimum_of_context, optimum_schedule_table
from .policy_folders import copy_run_files
from .simulation import SimContext, SimResult, build_context, simulate

if TYPE_CHECKING:
    import pandas as pd

    from .mechanisms import MechanismComparison
    from .shared_samples import SharedSamples

__all__ = [
    "COMPARISON_COLUMNS",
    "SimComparison",
    "default_out_dir",
    "run_comparison",
    "run_names",
    "write_comparison",
]

COMPARISON_COLUMNS = [
    "name",
    "kind",
    "total_s",
    "steps_per_hour",
    "tokens_per_s",
    "gpu_idle_fraction",
    "num_resizes",
    "thrash_count",
    "resize_time_s",
    "speedup_vs_best_static",
    "speedup_vs_baseline",
    "regret_s",
    "regret_pct",
]


@dataclass(frozen=True)
class SimComparison:
    context: SimContext
    runs: dict[str, SimResult]
    """Policy run name (its kind, numbered when repeated) -> result, in the order given."""
    table: pd.DataFrame
    """COMPARISON_COLUMNS: one row per policy, then one per static split."""
    optimum: OptimalSchedule
    """The offline-optimal schedule of the context (free start): the bound every row's regret
    is measured against."""


def run_names(kinds: Sequence[str]) -> list[str]:
    """Names of runs of the given policy kinds, in order: a kind's first run is named by the kind,
    its later ones are numbered (`hysteresis`, `hysteresis-2`, ...)."""
    seen: dict[str, int] = {}
    names = []
    for kind in kinds:
        seen[kind] = seen.get(kind, 0) + 1
        names.append(kind if seen[kind] == 1 else f"{kind}-{seen[kind]}")
    return names


def _regret_columns(total_s: float, optimum_s: float) -> dict[str, float]:
    """regret_s and regret_pct of a total against the offline optimum of its context."""
    regret = Regret(policy_total_s=float(total_s), optimal_total_s=optimum_s)
    return {"regret_s": regret.regret_s, "regret_pct": 100 * regret.regret_fraction}


def _policy_regret(context: SimContext, total_s: float, optimum_s: float) -> dict[str, float]:
    """A policy run's regret; none where the pipeline lends within steps, which the optimum of
    step-boundary schedules does not bound (`--mechanisms` gives lending's own bound)."""
    if context.config.pipeline.lending:
        return {"regret_s": float("nan"), "regret_pct": float("nan")}
    return _regret_columns(total_s, optimum_s)


def _comparison_table(
    context: SimContext, runs: dict[str, SimResult], optimum_s: float
) -> pd.DataFrame:
    config = context.config
    base = config.simulation.baseline_allocation
    rows = []
    for name, result in runs.items():
        s = result.summary
        rows.append(
            {
                "name": name,
                "kind": "policy",
                "total_s": s.total_s,
                "steps_per_hour": s.steps_per_hour,
                "tokens_per_s": s.tokens_per_s,
                "gpu_idle_fraction": s.gpu_idle_fraction,
                "num_resizes": s.num_resizes,
                "thrash_count": s.thrash_count,
                "resize_time_s": s.resize_time_s,
                "speedup_vs_best_static": s.speedup_vs_best_static,
                "speedup_vs_baseline": s.speedup_vs_baseline,
                **_policy_regret(context, s.total_s, optimum_s),
            }
        )
    static = context.baselines
    baseline_s = static.totals_s.get(base.label) if base is not None else None
    for row in static.table.itertuples(index=False):
        best = row.allocation == static.best_allocation
        rows.append(
            {
                "name": f"static {row.allocation}" + (" (best)" if best else ""),
                "kind": "static",
                "total_s": row.total_s,
                "steps_per_hour": row.steps_per_hour,
                "tokens_per_s": row.tokens_per_s,
                "gpu_idle_fraction": row.gpu_idle_fraction,
                "num_resizes": 0,
                "thrash_count": 0,
                "resize_time_s": 0.0,
                "speedup_vs_best_static": static.best_total_s / row.total_s,
                "speedup_vs_baseline": (baseline_s / row.total_s) if baseline_s else None,
                **_regret_columns(row.total_s, optimum_s),
            }
        )
    import pandas as pd

    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def run_comparison(
    config: ScenarioConfig,
    policies: Sequence[PolicyConfigBase],
    *,
    workload: Workload | None = None,
    samples: SharedSamples | None = None,
) -> SimComparison:
    """Simulate each policy on the scenario's workload (or the one given) and compare.
    `samples` (the run folder's `SharedSamples`, not started) is written from the workload's
    blocks as the context draws them, overlapping the context and the simulation."""
    sink = samples.block_sink(config) if samples is not None else None
    context = build_context(config, workload=workload, block_sink=sink)
    if samples is not None and sink is not None:
        samples.start(context)
    runs = {
        name: simulate(config, build_policy(cfg), context=context)
        for name, cfg in zip(run_names([str(cfg.kind) for cfg in policies]), policies, strict=True)
    }
    optimum = optimum_of_context(context)
    return SimComparison(
        context=context,
        runs=runs,
        table=_comparison_table(context, runs, optimum.total_s),
        optimum=optimum,
    )


def default_out_dir(runs_dir: str | Path) -> Path:
    """A new timestamped folder under `runs_dir` (suffixed if the second is already taken)."""
    stem = Path(runs_dir) / datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate, n = stem, 1
    while candidate.exists():
        candidate = stem.with_name(f"{stem.name}-{n}")
        n += 1
    return candidate


def _write_run(
    folder: Path,
    name: str,
    result: SimResult,
    *,
    timeline_svg: bool,
    timeline_png: bool,
    chrome_trace_max_steps: int | None,
    shared_samples: SharedSamples,
) -> None:
    """One run's folder: its trace tables, summary and Chrome trace.

    The samples table is the run's own where it went sample by sample (finish times and
    resumes); else the workload's, so that the folder can be replayed or calibrated from with
    the lengths simulated: the one table `shared_samples` writes for every run, linked into the
    folder once it is written, rather than the table validated and converted again.
    """
    # The writers load pandas and pyarrow: imported once there is something to write, so that
    # the command's path to the simulation loads neither.
    from dynaresize.traces.io import TableFile, Trace, write_trace
    from dynaresize.traces.timeline_svg import write_timeline_svg
    from dynaresize.traces.workload_inference import workload_samples

    samples = result.samples
    table_files: dict[str, TableFile] = {}
    if samples is None:  # the workload's rows: the shared table, linked in at the end
        samples = workload_samples(Workload.from_steps([], []))
        table_files["samples"] = _written_later
        shared_samples.attach(folder)
    config = result.context.config
    meta = RunMeta(
        source="twin",
        num_gpus=config.cluster.total_gpus,
        model_params_b=config.model.num_params_b,
        pipeline_mode=config.pipeline.mode,
        start_train_gpus=config.cluster.initial_allocation.train_gpus,
        start_rollout_gpus=config.cluster.initial_allocation.rollout_gpus,
        labels={"policy": name, "scenario": config.name},
    )
    write_trace(
        folder,
        Trace(
            meta=meta,
            steps=result.steps,
            resizes=result.resizes,
            decisions=result.decisions,
            samples=samples,
        ),
        table_files=table_files,
    )
    (folder / "summary.json").write_text(result.summary.model_dump_json(indent=2) + "\n")
    write_chrome_trace(
        folder / "trace.json",
        result.steps,
        result.resizes,
        decisions=result.decisions,
        run_name=f"{config.name}: {name}",
        pipeline_mode=config.pipeline.mode,
        max_steps=chrome_trace_max_steps,
    )
    title = f"{config.name}: {name}"
    if timeline_svg:
        write_timeline_svg(folder / "timeline.svg", result.steps, result.resizes, title=title)
    if timeline_png:
        _write_timeline(folder / "timeline.png", result, title=title)


TIMELINE_FILES = ("timeline.svg", "timeline.png")


def _written_later(path: Path) -> None:
    """A table put in place once the folder is written (`SharedSamples`)."""


def _write_timeline(path: Path, result: SimResult, *, title: str) -> None:
    """The matplotlib timeline (asked for with output.timeline_png): importing matplotlib and
    drawing take longer than a small simulation, so the SVG is the default picture."""
    from .plots import plot_timeline

    fig = plot_timeline(result.steps, result.resizes, title=title)
    fig.savefig(path, dpi=100)


def _summary_document(comparison: SimComparison) -> dict:
    """summary.json: every policy's summary and every static split, each with its regret
    against the one offline optimum of the run's context."""
    optimum = comparison.optimum
    baselines = comparison.context.baselines
    policies = {
        name: {
            **result.summary.model_dump(mode="json"),
            **_policy_regret(comparison.context, result.summary.total_s, optimum.total_s),
        }
        for name, result in comparison.runs.items()
    }
    statics = [
        {**row, **_regret_columns(row["total_s"], optimum.total_s)}
        for row in baselines.table.to_dict(orient="records")
    ]
    return {
        "scenario": comparison.context.config.name,
        "policies": policies,
        "static_splits": statics,
        "best_static_allocation": baselines.best_allocation,
        "best_static_total_s": baselines.best_total_s,
        "offline_optimal": {
            "total_s": optimum.total_s,
            "num_resizes": optimum.num_resizes,
            "resize_s": optimum.resize_s,
            "schedule": optimum_schedule_table(comparison.context, optimum).to_dict(
                orient="records"
            ),
            "start": comparison.context.step_costs.candidates[int(optimum.candidate_index[0])].label
            if len(optimum.candidate_index)
            else None,
        },
    }


def write_comparison(
    comparison: SimComparison,
    out_dir: str | Path,
    *,
    resolved_config: dict,
    timeline_svg: bool = True,
    timeline_png: bool = False,
    mechanisms: MechanismComparison | None = None,
    chrome_trace_max_steps: int | None = CHROME_TRACE_MAX_STEPS,
    samples: SharedSamples | None = None,
) -> Path:
    """Write the run folder: the first policy's tables, trace.json (Chrome trace / Perfetto) and
    timeline.svg (and timeline.png if asked) at the top, every policy's tables and trace.json
    under policies/<name>/ when there are several, plus config.json, summary.json (every policy
    and static split, with regrets against the offline optimum) and comparison.csv; with
    `mechanisms`, mechanisms.csv, .json and .png (twin.mechanisms). A trace.json shows at most
    `chrome_trace_max_steps` steps, the first ones (None: every step): the tables keep them all.

    Everything is written into a staging folder beside `out_dir` and renamed into place at the
    end, so a failure leaves no partial folder (and an existing `out_dir` is replaced whole).
    `samples`: the table `run_comparison` started beside `out_dir`, else it is started here.
    """
    from dynaresize.traces.jsonl_io import dumps_finite

    from .shared_samples import SharedSamples

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    with staged_dir(out, replace=True) as staging:
        names = list(comparison.runs)
        first = names[0]
        # One workload for every run: its samples table written once, on a thread of its own
        # beside everything else, a chunk at a time straight from its arrays, and linked into
        # every folder of a run without samples of its own once they are all written.
        needed = any(run.samples is None for run in comparison.runs.values())
        if samples is None or not samples.started:
            samples = SharedSamples(comparison.context, beside=staging, needed=needed)
        with samples as shared:
            _write_run(
                staging,
                first,
                comparison.runs[first],
                timeline_svg=timeline_svg,
                timeline_png=timeline_png,
                chrome_trace_max_steps=chrome_trace_max_steps,
                shared_samples=shared,
            )
            if len(names) > 1:
                # The first run's tables and traces head the folder and fill its policy
                # folder: linked there, not validated and written twice. One picture per run
                # folder is enough to read it; drawing one per policy would cost more than
                # simulating them.
                copy_run_files(staging, staging / "policies" / first, leave_out=TIMELINE_FILES)
                if comparison.runs[first].samples is None:
                    shared.attach(staging / "policies" / first)
                for name in names[1:]:
                    _write_run(
                        staging / "policies" / name,
                        name,
                        comparison.runs[name],
                        timeline_svg=False,
                        timeline_png=False,
                        chrome_trace_max_steps=chrome_trace_max_steps,
                        shared_samples=shared,
                    )
        (staging / "config.json").write_text(json.dumps(resolved_config, indent=2) + "\n")
        summary = _summary_document(comparison)
        (staging / "summary.json").write_text(dumps_finite(summary) + "\n")
        comparison.table.to_csv(staging / "comparison.csv", index=False)
        # beside the policies' decisions: where the best schedule possible would have moved
        optimum_schedule_table(comparison.context, comparison.optimum).to_csv(
            staging / "optimal_schedule.csv", index=False
        )
        if mechanisms is not None:
            from .mechanisms import write_mechanisms

            title = f"{comparison.context.config.name}: mechanisms side by side"
            write_mechanisms(mechanisms, staging, title=title)
    return out
