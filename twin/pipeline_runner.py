"""Drive one run through the pipeline that fits it: the whole-batch one (`pipeline.py`), or the
sample-level one (`sample_pipeline.py`) when lending or partial rollouts need to know which
requests are in flight. A module of its own so that neither pipeline imports the other's
subclass."""

from __future__ import annotations

from dynaresize.traces.phases import PipelineMode

from .pipeline import StepClock, _Pipeline
from .pipeline_run import PipelineRecords, PipelineRun

__all__ = ["run_pipeline"]


def run_pipeline(run: PipelineRun) -> PipelineRecords:
    """Run one policy over every step of `run.costs`; returns the filled record columns."""
    if run.samples is None and run.pipeline.mode is not PipelineMode.ASYNC:
        clock = StepClock()  # one process, nothing to interleave: no event queue
        lockstep = _Pipeline(run, clock=clock)
        lockstep.lockstep_on(clock)
        return lockstep.finish()
    if run.samples is None:
        sim = _Pipeline(run)
    else:
        from .sample_pipeline import SamplePipeline  # SimPy's, imported where it runs

        sim = SamplePipeline(run)
    if run.pipeline.mode is PipelineMode.ASYNC:
        sim.run_async()
    else:
        sim.env.process(sim.lockstep())
    sim.env.run()
    return sim.finish()
