"""A local Hugging Face model folder: check it, load it with its tokenizer, write one back out.

Nothing is ever downloaded: every load passes `local_files_only=True`, and a path that is not a
local folder is an error before transformers sees it (a Hub name such as `Qwen/Qwen2-0.5B` gets
a hint to download it first). `inspect_model_folder` reads only JSON files and the file listing,
so the driver can check a folder in milliseconds, before Ray starts, and name what is missing
(config, weights, tokenizer). Weights are read from safetensors only: a pickled
`pytorch_model.bin` can run code when loaded.

`export_hf_folder` writes a trained policy (safetensors, config, generation config, tokenizer)
that `AutoModelForCausalLM.from_pretrained` loads as is. It writes into a fresh temporary folder
beside the target and renames it into place, so a crash leaves no half-written model, and it
refuses a target that already holds files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynaresize.config_io import ConfigError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
SAFETENSORS_INDEX = "model.safetensors.index.json"
DTYPES = ("float32", "bfloat16", "float16")


class ModelFolderError(ConfigError):
    """A model path is not a usable local Hugging Face folder, or an export target is taken."""


@dataclass(frozen=True)
class ModelFolder:
    """What a model folder holds, read without loading any weights."""

    path: Path
    model_type: str
    architectures: tuple[str, ...]
    weight_files: tuple[str, ...]
    vocab_size: int | None
    context_tokens: int | None
    """`max_position_embeddings`: the longest prompt plus response the model was built for."""
    eos_token_ids: tuple[int, ...]
    """From generation_config.json when present (Qwen2-Instruct lists two), else config.json."""
    has_chat_template: bool


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    folder: ModelFolder


def inspect_model_folder(path: str | Path) -> ModelFolder:
    """Check that `path` is a local causal-LM folder with config, weights and tokenizer."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelFolderError(f"model.path: {path}: no such folder{_hub_hint(str(path))}")
    if not folder.is_dir():
        raise ModelFolderError(f"model.path: {path}: not a folder (give the model's folder)")
    config = _read_json(folder / "config.json", what="config.json (the model's architecture)")
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise ModelFolderError(f"model.path: {folder / 'config.json'}: no model_type")
    weights = _weight_files(folder)
    missing_tokenizer = not any((folder / name).is_file() for name in TOKENIZER_FILES)
    if missing_tokenizer:
        raise ModelFolderError(
            f"model.path: {folder}: no tokenizer (neither {' nor '.join(TOKENIZER_FILES)})"
        )
    tokenizer_config = _read_json_if(folder / "tokenizer_config.json")
    return ModelFolder(
        path=folder,
        model_type=model_type,
        architectures=tuple(config.get("architectures") or ()),
        weight_files=weights,
        vocab_size=config.get("vocab_size"),
        context_tokens=config.get("max_position_embeddings"),
        eos_token_ids=_eos_ids(folder, config),
        has_chat_template="chat_template" in tokenizer_config
        or any((folder / name).is_file() for name in CHAT_TEMPLATE_FILES),
    )


def _hub_hint(text: str) -> str:
    looks_like_hub = text.count("/") == 1 and not text.startswith((".", "/", "~"))
    if not looks_like_hub:
        return ""
    return (
        f" (models are never downloaded; to use the Hub model {text}, download it first, e.g. "
        f"`huggingface-cli download {text} --local-dir DIR`, and give DIR)"
    )


def _read_json(path: Path, *, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ModelFolderError(f"model.path: {path.parent}: no {what}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelFolderError(f"model.path: {path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"model.path: {path}: expected a JSON object")
    return data


def _read_json_if(path: Path) -> dict[str, Any]:
    return _read_json(path, what=path.name) if path.is_file() else {}


def _weight_files(folder: Path) -> tuple[str, ...]:
    index_path = folder / SAFETENSORS_INDEX
    if index_path.is_file():
        weight_map = _read_json(index_path, what=SAFETENSORS_INDEX).get("weight_map", {})
        shards = sorted(set(weight_map.values()))
        missing = [name for name in shards if not (folder / name).is_file()]
        if not shards or missing:
            raise ModelFolderError(
                f"model.path: {folder}: {SAFETENSORS_INDEX} lists weight files that are not "
                f"there: {', '.join(missing[:3]) or 'none listed'}"
            )
        return tuple(shards)
    found = sorted(p.name for p in folder.glob("*.safetensors"))
    if found:
        return tuple(found)
    pickled = sorted(p.name for p in folder.glob("pytorch_model*.bin"))
    hint = (
        f"; {pickled[0]} is there but pickled weights are not read (save the model with "
        "save_pretrained to get safetensors)"
        if pickled
        else ""
    )
    raise ModelFolderError(f"model.path: {folder}: no weights (*.safetensors){hint}")


def _eos_ids(folder: Path, config: dict[str, Any]) -> tuple[int, ...]:
    generation = _read_json_if(folder / "generation_config.json")
    value = generation.get("eos_token_id", config.get("eos_token_id"))
    if value is None:
        return ()
    return tuple(int(v) for v in (value if isinstance(value, list) else [value]))


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The folder's tokenizer, local files only. A tokenizer without a pad token pads with its
    end-of-sequence token (as veRL does): batched prompts and responses need one."""
    from transformers import AutoTokenizer

    folder = Path(path).expanduser()
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as err:  # transformers raises many kinds; the folder is what is wrong
        raise ModelFolderError(
            f"model.path: {folder}: the tokenizer does not load: {type(err).__name__}: {err}"
        ) from None
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in DTYPES:
        raise ModelFolderError(f"model.dtype: {name!r} is not one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def load_model(
    path: str | Path,
    *,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
    attn_implementation: str = "sdpa",
) -> PreTrainedModel:
    """The folder's causal LM in `dtype` on `device`, in eval mode; local files only, no code
    from the folder is run (`trust_remote_code` stays off)."""
    from transformers import AutoModelForCausalLM

    folder = inspect_model_folder(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder.path,
            local_files_only=True,
            dtype=torch_dtype(dtype),
            attn_implementation=attn_implementation,
        )
    except ModelFolderError:
        raise
    except Exception as err:
        raise ModelFolderError(
            f"model.path: {folder.path}: transformers cannot load this {folder.model_type} "
            f"model: {type(err).__name__}: {err}"
        ) from None
    return model.to(device).eval()  # type: ignore[arg-type]


def load_model_folder(
    path: str | Path,
    *,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
    attn_implementation: str = "sdpa",
) -> LoadedModel:
    """Model and tokenizer of one folder, checked to fit each other."""
    folder = inspect_model_folder(path)
    tokenizer = load_tokenizer(folder.path)
    if folder.vocab_size is not None and len(tokenizer) > folder.vocab_size:
        raise ModelFolderError(
            f"model.path: {folder.path}: the tokenizer has {len(tokenizer)} tokens but the "
            f"model's vocabulary (config.json vocab_size) has only {folder.vocab_size}"
        )
    model = load_model(
        folder.path, dtype=dtype, device=device, attn_implementation=attn_implementation
    )
    return LoadedModel(model=model, tokenizer=tokenizer, folder=folder)


def export_hf_folder(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    *,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write `model` (its current weights and dtype) and `tokenizer` as a Hugging Face folder at
    `out_dir`, which must not exist or be empty; `extra_files` (name: text) go in with them.
    Returns the folder."""
    target = Path(out_dir).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ModelFolderError(
            f"export: {target} already exists and is not an empty folder; give a new one"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        for name, text in (extra_files or {}).items():
            (staging / name).write_text(text, encoding="utf-8")
        if not any(staging.glob("*.safetensors")):
            raise ModelFolderError(f"export: no safetensors file was written for {target}")
        if target.exists():
            target.rmdir()  # empty, checked above
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
