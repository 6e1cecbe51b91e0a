"""Resize strategies filling the executor's `ResizeStrategy` slot (`executor/resize.py`).

- `host_sync`: every phase on the critical path, state through the Ray object store;
- `overlapped`: the same move with three switchable mechanisms (cached communicators, bounded
  host staging, deferred optimizer reload); its worker side is `overlapped_worker`;
- `stop_and_rebuild`: the baseline, a checkpoint through disk and new workers; its worker side is
  `stop_and_rebuild_worker`.

`catalog.build_strategy` picks one by its config name. `plan` is the slice re-cut plan and
`measure` says how a resize is measured.

Strategies may import the rest of `dynaresize.executor`, `dynaresize.policies` and
`dynaresize.traces`; the twin only through the executor's cost estimates.
"""
