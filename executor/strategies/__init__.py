"""Fast resize strategies (`overlapped`, with each mechanism a switch) and the baseline
(`stop_and_rebuild`), filling the executor's `ResizeStrategy` slot.

Importing a strategy module registers it with `executor.resize`. The worker-side half lives in
`agent.FastResizeWorker`, mixed into the live worker. `measure` says how a resize is measured.
"""
