"""The digital twin: cost models, a SimPy pipeline, `simulate()`, the offline optimum.

What it is for: evaluating resize policies offline, fast enough to sweep thousands of settings,
and checking them against what live runs recorded. The package holds the core and three
subpackages, one per job:

- the core (this folder): `config` (`ScenarioConfig`, `load_config`), `costs/` (the cost
  models), `step_costs` (every stage time of every step on every split), `pipeline` (the SimPy
  pipeline; `sample_pipeline`, `batch_in_flight` and `lend_wait` follow batches sample by
  sample where the trainers' GPUs are lent within a step or requests keep partial rollouts),
  `simulation` (`build_context`, `simulate`), `summary`, `baselines` (static splits),
  `optimal` (the offline optimum and regret), `comparison` (several policies on one workload and
  the run folder of `dynaresize run --mode sim`), `mechanisms` (the ways of moving GPUs side by
  side), `plots`, and the two inputs every trace-driven
  job shares: `trace_source` (opening a user's trace) and `analysis_context` (the scenario of a
  traced job, from a config or from the trace and stated assumptions);
- `twin.calibration`: cost parameters fitted to traces, and validation of the fitted twin
  against a recorded run;
- `twin.analysis`: replay of a recorded run and the break-even of resizes;
- `twin.sweeps`: many runs over a space of settings, cached, on local cores or Ray.

What it may import: `dynaresize.policies`, `dynaresize.traces` and `dynaresize.config_io`. Inside,
calibration imports the core, analysis imports the core and calibration, sweeps import the
core. Never `dynaresize.config`, the command line, the executor, torch or ray: configs arrive as a
`ScenarioConfig` or the path of a scenario YAML file.

The names below are the front door (`from dynaresize.twin import simulate, load_config`); each is
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .analysis_context import AnalysisContext, context_from_config
    from .comparison import SimComparison, default_out_dir, run_comparison, write_comparison
    from .config import ScenarioConfig, load_config
    from .costs import CostModels, load_costs
    from .optimal import OptimalSchedule, Regret, offline_optimum, optimum_of_context
    from .simulation import SimContext, SimResult, build_context, simulate
    from .trace_source import open_trace, trace_notes, trace_workload, workload_samples

__all__ = [
    "AnalysisContext",
    "CostModels",
    "OptimalSchedule",
    "Regret",
    "ScenarioConfig",
    "SimComparison",
    "SimContext",
    "SimResult",
    "build_context",
    "context_from_config",
    "default_out_dir",
    "load_config",
    "load_costs",
    "offline_optimum",
    "open_trace",
    "optimum_of_context",
    "run_comparison",
    "simulate",
    "trace_notes",
    "trace_workload",
    "workload_samples",
    "write_comparison",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AnalysisContext": "analysis_context",
        "context_from_config": "analysis_context",
        "SimComparison": "comparison",
        "default_out_dir": "comparison",
        "run_comparison": "comparison",
        "write_comparison": "comparison",
        "ScenarioConfig": "config",
        "load_config": "config",
        "CostModels": "costs",
        "load_costs": "costs",
        "OptimalSchedule": "optimal",
        "Regret": "optimal",
        "offline_optimum": "optimal",
        "optimum_of_context": "optimal",
        "SimContext": "simulation",
        "SimResult": "simulation",
        "build_context": "simulation",
        "simulate": "simulation",
        "open_trace": "trace_source",
        "trace_notes": "trace_source",
        "trace_workload": "trace_source",
        "workload_samples": "trace_source",
    },
)
