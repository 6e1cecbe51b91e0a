"""The RL core: a model builder, the project's own KV-cached sampler, a long-tail task, GRPO.

Everything here runs in one process on CPU or one GPU; `dynaresize.executor` distributes it over
Ray workers. The pieces are small on purpose so that a worker can call just the one it needs:

- `model_spec`: `ModelSpec`, which model to build, checked without torch.
- `model`:   `ModelSpec` -> a Hugging Face causal LM built from a config (never downloaded).
- `engine`:  the `RolloutEngine` protocol and its request/result types.
- `sampler`: `KVCacheSampler`, the project's engine (static KV cache, shrinking active batch,
             per-sample counter-based seeding, CUDA graphs on CUDA); `HFGenerateEngine`, the
             Hugging Face `generate` baseline.
- `task`:    `RepeatTask`, prompts whose correct answers have heavy-tailed lengths, and its checker.
- `grpo`:    pure advantage and loss functions; the optimizer step is the caller's.
- `settings`: `ObjectiveSettings` and `OptimizerSettings`, the GRPO and AdamW knobs (no torch).

The one GRPO loop is the live executor's (`executor/driver.py` with its trainer and rollout
roles); there is no second, single-process loop here.

It may import `dynaresize.config_io`; torch and transformers are imported by the modules that
compute (`model_spec` and `settings` import neither).
"""
