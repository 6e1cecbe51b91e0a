"""The RL core: a model builder, a long-tail task, GRPO.

Everything here runs in one process on CPU or one GPU; `dynaresize.executor` distributes it over
Ray workers. The pieces are small on purpose so that a worker can call just the one it needs:

- `model_spec`: `ModelSpec`, which model to build, checked without torch.
- `model`:   `ModelSpec` -> a Hugging Face causal LM built from a config (never downloaded); its
             weights as one flat vector and back.
- `task`:    `RepeatTask`, prompts whose correct answers have heavy-tailed lengths, and its checker.
- `grpo`:    pure advantage and loss functions; the optimizer step is the caller's.
- `settings`: `ObjectiveSettings` and `OptimizerSettings`, the GRPO and AdamW knobs (no torch).
- `weights_digest`: a short fingerprint of a flat weight vector.

The rollout engines moved to `executor.engines`: the engine interface (was `rl.engine`, now
`engines.interface`), the project's KV-cached sampler (`sampler`, `decoder`, `sampling`), Hugging
Face `generate` (`hf_engine`), vLLM (`vllm_engine`), the engine config (was `rl.engine_config`,
now `engines.config`), the engine builder (was `rl.engines`, now `engines.build`) and the engine
process (was `rl.engine_process` and `rl.engine_child`, now `engines.process` and
`engines.process_child`).

The one GRPO loop is the live executor's (`executor/session.py` with the worker's trainer and
rollout roles); there is no second, single-process loop here.

It may import `dynaresize.config_io`; torch and transformers are imported by the modules that
compute (`model_spec` and `settings` import neither).
"""
