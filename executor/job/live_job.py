"""A live run's job, from its `live:` section: the prompt source the driver draws from, the scorer
and the rollout shape each replica builds, and the checks that run before Ray starts.

Two jobs exist. Without `live.data` it is the built-in repeat task, exactly as before (prompts from
`RepeatTask`, scored on tokens, the task's character tokenizer). With `live.data` it is the user's:
a local Hugging Face folder at `live.model.path` (its tokenizer renders and decodes), prompts from
veRL-format files, and the reward of `live.reward`. Everything the user gave is read here once on
the driver, before Ray starts, so that a missing file, a bad row, an absent reward function or a
prompt longer than the model's context is one error line and nothing is started; the workers then
build only what they need (`replica_scorer`, `rollout_shape`) from the same, already checked,
configuration.

Relative paths: `resolve_job_paths` makes the model folder, the dataset files and the reward file
absolute against a base folder (the config file's folder for a run from the command line), so that
workers, whatever folder they run in, read the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynaresize.config_io import ConfigError

from .hf_folder import ModelFolder, inspect_model_folder

if TYPE_CHECKING:
    from ..config import LiveConfig
    from .prompt_source import PromptSource
    from .scoring import SampleScorer


def _absolute(path: str | Path, base: Path) -> str:
    expanded = Path(path).expanduser()
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())


def resolve_job_paths(live: LiveConfig, base_dir: str | Path) -> LiveConfig:
    """`live` with `model.path`, `data.train_files` and `reward.path` made absolute against
    `base_dir` (`~` expanded); everything else unchanged."""
    base = Path(base_dir).expanduser().resolve()
    update: dict[str, Any] = {}
    if live.model.path is not None:
        model = live.model.model_copy(update={"path": Path(_absolute(live.model.path, base))})
        update["model"] = model
    if live.data is not None:
        files = tuple(_absolute(name, base) for name in live.data.train_files)
        update["data"] = live.data.model_copy(update={"train_files": files})
    if live.reward is not None and live.reward.path is not None:
        update["reward"] = live.reward.model_copy(
            update={"path": _absolute(live.reward.path, base)}
        )
    if live.export_hf_dir is not None:
        update["export_hf_dir"] = _absolute(live.export_hf_dir, base)
    return live.model_copy(update=update) if update else live


def model_folder(live: LiveConfig) -> ModelFolder:
    """The checked model folder of a run with its own data."""
    if live.model.path is None:
        raise ConfigError("live.data needs live.model.path, the model folder with its tokenizer")
    return inspect_model_folder(live.model.path)


def prompt_limit_tokens(live: LiveConfig, folder: ModelFolder) -> int:
    """The longest prompt a replica must hold: `data.max_prompt_tokens` or what the model's
    context leaves once `max_response_tokens` is set aside, the smaller."""
    assert live.data is not None
    limits = []
    if live.data.max_prompt_tokens is not None:
        limits.append(live.data.max_prompt_tokens)
    if folder.context_tokens is not None:
        room = folder.context_tokens - live.max_response_tokens
        if room < 1:
            raise ConfigError(
                f"live.max_response_tokens: {live.max_response_tokens} leaves no room for a "
                f"prompt in the model's context of {folder.context_tokens} tokens "
                f"({folder.path / 'config.json'} max_position_embeddings)"
            )
        limits.append(room)
    if not limits:
        raise ConfigError(
            f"live.data.max_prompt_tokens: the model ({folder.path}) states no context length "
            "(max_position_embeddings); set a prompt limit"
        )
    return min(limits)


@dataclass(frozen=True)
class RolloutShape:
    """What a replica's engine is sized and stopped by."""

    max_prompt_tokens: int
    eos_token_id: int | None


def rollout_shape(live: LiveConfig) -> RolloutShape:
    """The longest prompt and the end-of-sequence id of the run's job (reads only JSON files)."""
    if live.data is None:
        from ..rl.task import TOKENIZER

        return RolloutShape(
            max_prompt_tokens=1 + len(str(live.task.max_count)) + 3,
            eos_token_id=TOKENIZER.eos_token_id,
        )
    folder = model_folder(live)
    eos = folder.eos_token_ids[0] if folder.eos_token_ids else None
    if eos is None:
        eos = _load_tokenizer(folder).eos_token_id
    return RolloutShape(max_prompt_tokens=prompt_limit_tokens(live, folder), eos_token_id=eos)


def _load_tokenizer(folder: ModelFolder) -> Any:
    from .hf_folder import load_tokenizer

    tokenizer = load_tokenizer(folder.path)
    if folder.vocab_size is not None and len(tokenizer) > folder.vocab_size:
        raise ConfigError(
            f"model.path: {folder.path}: the tokenizer has {len(tokenizer)} tokens but the "
            f"model's vocabulary (config.json vocab_size) has only {folder.vocab_size}"
        )
    return tokenizer


def prepare_prompt_source(live: LiveConfig) -> PromptSource:
    """The driver's prompt source, every input checked: the repeat task, or the model folder, its
    tokenizer, the reward function and the dataset (read, rendered and tokenized once here)."""
    from ..rl.task import RepeatTask
    from .prompt_source import DatasetPromptSource, RepeatPromptSource
    from .reward import load_reward

    if live.data is None:
        return RepeatPromptSource(
            RepeatTask(live.task), seed=live.seed, prompts_per_step=live.prompts_per_step
        )
    assert live.reward is not None  # LiveConfig requires it with data
    folder = model_folder(live)
    tokenizer = _load_tokenizer(folder)
    load_reward(live.reward)  # the file runs and the function is checked now, not in a worker
    return DatasetPromptSource.from_config(
        live.data,
        tokenizer,
        run_seed=live.seed,
        prompts_per_step=live.prompts_per_step,
        context_tokens=prompt_limit_tokens(live, folder),
    )


def replica_scorer(live: LiveConfig) -> SampleScorer:
    """The reward of each sample on a replica: the repeat task's checker, or the run's reward
    function on responses decoded with the model folder's tokenizer."""
    from ..rl.task import RepeatTask
    from .scoring import build_scorer

    if live.data is None or live.reward is None:
        return build_scorer(None, task=RepeatTask(live.task))
    folder = model_folder(live)
    tokenizer = _load_tokenizer(folder)
    eos_ids = set(folder.eos_token_ids)
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    return build_scorer(live.reward, tokenizer=tokenizer, eos_token_ids=sorted(eos_ids))


def restore_prompt_position(
    source: PromptSource, saved: dict[str, Any] | None, *, next_batch_id: int
) -> None:
    """Put `source` where a checkpoint left it: its saved position, or, for the repeat task in a
    checkpoint that has none (written before positions were kept), the batch id alone (its
    prompts depend on nothing else)."""
    from .prompt_source import RepeatPromptSource, SamplerStateError

    if saved is not None:
        source.load_state_dict(saved)
    elif isinstance(source, RepeatPromptSource):
        source.next_batch_id = next_batch_id
    else:
        raise SamplerStateError(
            "--resume: the checkpoint holds no prompt position, so the dataset's order cannot "
            "be continued; start a new run"
        )
    if getattr(source, "next_batch_id", next_batch_id) != next_batch_id:
        raise SamplerStateError(
            f"--resume: the checkpoint's prompt position is at batch "
            f"{getattr(source, 'next_batch_id', '?')}, its next step needs batch {next_batch_id}"
        )


def check_export_target(path: str | Path, *, option: str) -> None:
    """The export folder must be new or empty: a trained policy never lands on other files."""
    target = Path(path).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(
            f"{option} {path}: already exists and is not an empty folder; the trained policy "
            "is written only into a new or empty folder"
        )
    for parent in target.absolute().parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")


def export_policy(live: LiveConfig, flat_weights: Any, out_dir: str | Path) -> Path:
    """Write the trained weights (`flat_weights`, one vector in `parameters()` order, as a
    trainer holds them) into the model of `live.model.path` and save it, with the folder's
    tokenizer, as a Hugging Face folder at `out_dir`."""
    from ..rl.model import load_flat_parameters
    from .hf_folder import export_hf_folder, load_model_folder

    assert live.model.path is not None
    loaded = load_model_folder(live.model.path, dtype=live.model.dtype.value, device="cpu")
    load_flat_parameters(loaded.model, flat_weights)
    return export_hf_folder(loaded.model, loaded.tokenizer, out_dir)
