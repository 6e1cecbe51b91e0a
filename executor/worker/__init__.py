"""The worker side: what runs inside one long-lived Ray actor, one per device.

What it is for: the actor (`actor.LiveWorker`), what it owns whatever its role (`state`), its
rollout engine across role changes (`engine`), its two roles (`trainer`, `rollout`, with the
ZeRO-1 slices of `shards` and the loss of `objective`), and each resize strategy's worker half
(`host_sync`, `overlapped` with `routed`, `stop_and_rebuild`), with what those share: the slice
re-cut plan (`slice_moves`), the communicator cache (`comm_cache`) and the deferred optimizer
reload (`deferred_optimizer`), and the weight sync (`device_weights`: by CUDA IPC on one node,
the network for the rest, each replica's path decided once in `sync_paths`).

It may import the top of `dynaresize.executor` that both sides share (config, roles, batch,
ports), `executor.job`, `executor.rl`, `executor.engines`, `executor.staging`,
`dynaresize.policies` (`Allocation`) and `dynaresize.traces` (the phase vocabulary); never the
driver side (`executor.cluster`, `executor.strategies`, `executor.session`, `executor.driver`),
which a worker process has no use for.
"""
