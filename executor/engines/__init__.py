"""Rollout engines behind one interface: the project's sampler, Hugging Face `generate`, vLLM.

- `interface`:      the `RolloutEngine` protocol and its request and result types;
- `config`:         the `rollout_engine:` section (pure pydantic: no torch, no vLLM);
- `build`:          the engine a run asks for, with the lifecycle a resize uses (`ManagedEngine`);
- `sampler`, `decoder`, `sampling`: the project's KV-cached sampler, its lean forward pass and
                    the per-sample keyed token choice;
- `hf_engine`:      Hugging Face `generate`, the baseline;
- `vllm_engine`:    vLLM in the caller's process; `vllm_adapter` where vLLM's releases differ,
                    `vllm_weights` the names it loads weights by;
- `process`, `process_child`, `process_parts`, `process_buffers`: any engine in a child process
                    of its own, and the buffer weights reach it through;
- `device_share`:   a CUDA buffer mapped by other processes of the node (CUDA IPC).

These modules were in `executor.rl` before it kept only the model, task and GRPO code.

It may import `dynaresize.config_io` and the RL core (`executor.rl`: the model builder, its
spec, the weight digest); torch is imported by the modules that compute, vLLM only when a vLLM
engine is built.
"""
