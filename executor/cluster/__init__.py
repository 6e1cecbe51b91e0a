"""The driver's side of the cluster: Ray, the workers' placement, the calls to them, and the end.

What it is for: everything the driver process does to hold a set of long-lived worker actors.

- `ray_cluster`:   start or join Ray, one placement-group bundle per device, the worker actors,
                   `Cluster` and its shutdown;
- `auth`:          Ray's token authentication, with a token no other user can read;
- `placement`:     workers over nodes: bundles, the checks before anything starts, the node map;
- `runtime`:       `Runtime`, the typed remote calls (`rt.call(ids, LiveWorker.x, ...)`) and
                   waits; a dead worker becomes `faults.WorkerLostError`;
- `worker_setup`:  the workers from fresh actors to their roles, each part timed;
- `engine_memory`: `rollout_engine.release: auto`, decided by a memory check before Ray starts;
- `shutdown`, `watchdog`: how a run ends, whatever ends it, with nothing left running.

It may import the top of `dynaresize.executor` (config, roles, faults, ports), the worker side
(`executor.worker`: the actor class whose methods it calls), `executor.job`, `executor.rl`,
`executor.engines`, `executor.staging` and `executor.run_folder` (a checkpoint to set up from);
never the strategies, the session or the driver, which sit above it.
"""
