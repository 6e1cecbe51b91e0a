"""The resize strategies' driver halves: how the driver moves the workers from one split to
another at a step boundary.

A strategy is one `Strategy` object (`strategy.py`): its driver half (a `ResizeStrategy`), its
worker half (in `executor/worker/`), the phases it records and the setup parts its resize repeats.
`catalog.STRATEGIES` lists them, one line each:

- `host_sync`: every phase on the critical path, state through the Ray object store;
- `overlapped`: the same move with three switchable mechanisms (cached communicators, bounded
  host staging, deferred optimizer reload);
- `stop_and_rebuild`: the baseline, a checkpoint through disk and new workers.

The strategies may import the top of `dynaresize.executor` (config, roles), the driver's cluster
(`executor.cluster`: the runtime, the actors' start), the worker side (`executor.worker`: the
methods they call, the re-cut plan), `executor.staging`, `dynaresize.policies` and
`dynaresize.traces`; never the session or the driver, which call them.
"""
