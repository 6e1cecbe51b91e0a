"""A user's own RL job: a local Hugging Face model folder, prompts in veRL's dataset format and a
reward function, in the formats a veRL user already has.

What it is for: turning those three inputs into what the live executor consumes (token ids of
prompts drawn in a reproducible order, a float reward per sample, a model with its tokenizer) and
writing a trained policy back out as a Hugging Face folder. Each module does one of these:

- `config`:         `DataConfig`, `RewardConfig` (pure pydantic: importable without torch).
- `dataset_files`:  read and check the rows of Parquet / JSONL files (no tokenizer needed).
- `dataset`:        render and tokenize the rows, apply the prompt length limit.
- `prompt_sampler`: the order prompts are drawn in: seeded shuffles, epochs, a restorable position.
- `prompt_source`:  `PromptSource`, the batches a run draws (the repeat task or a dataset): ids,
                    token ids and what the reward needs, and a position for the checkpoint.
- `reward`:         load a user's `compute_score` (or a built-in) and call it safely.
- `builtin_rewards`: exact match on a final number (`#### 42`), and the repeat task's verifier.
- `scoring`:        the reward of one generated sample: the repeat task's checker on tokens, or the
                    reward function on the decoded response.
- `hf_folder`:      check and load a local model folder; export a trained policy as one.
- `char_model`:     a character-level tokenizer and a tiny Qwen2/Llama folder built locally.
- `live_job`:       the live run's job from its `live:` section: the driver's prompt source and
                    checks before Ray starts, each replica's scorer and engine shape, the export
                    of the trained policy, job paths made absolute.

What it may import: `dynaresize.config_io`, the RL core's task (`executor.rl.task`, for the
repeat verifier) and, inside `live_job`'s functions, its model helpers (`executor.rl.model`),
pydantic, numpy, pyarrow; torch and transformers only inside the functions that
load or write models and tokenizers, so that `config`, `dataset_files`, `prompt_sampler` and the
checks of `hf_folder` run before (and without) Ray or torch.
"""
