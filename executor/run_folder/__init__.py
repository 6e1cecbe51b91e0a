"""What a live run writes into its folder, and how it reads it back.

- `records`:             the trace and lineage JSONL files (`RunRecorder`, `LineageRecord`);
- `lineage`:             the lineage check of a run, from its records alone;
- `published_weights`:   `weights.jsonl`, the digest of every weights version published;
- `checkpoint`, `checkpoint_manifest`: checkpoints at step boundaries and their manifest;
- `resume_check`:        what `--resume` accepts;
- `unstarted`:           a fresh run that fails before its first step leaves its folder as it
                         found it.

It may import the top of `dynaresize.executor` (config, batch), `dynaresize.config_io`,
`dynaresize.policies` and `dynaresize.traces`; never Ray, and never the driver or worker sides.
"""
