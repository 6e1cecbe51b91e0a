"""A byte-level tokenizer with one token per character, a chat template, and a tiny model on it.

The shipped arithmetic task and the tests need a real Hugging Face model folder (config,
safetensors, tokenizer with a chat template) without downloading one. This builds it: a
byte-level BPE with no merges (each byte is one token, so each ASCII character is one, and any
text round-trips), a few special tokens, a chat template in the style of the instruct models
(`<|user|>...<|end|><|assistant|>`), and a small randomly initialised Qwen2 or Llama model whose
vocabulary is exactly the tokenizer's. The tokenizer has the pipeline transformers rebuilds for a
Qwen2 folder (byte-level pre-tokenizer and decoder), so `AutoTokenizer` on the folder gives the
same tokens as `tokenizer.json` read verbatim (as a Rust or vLLM tokenizer would). The folder is
built where the caller says (a cache, a run folder, a test's temporary folder) and then loaded
like any other local model folder, through `hf_folder`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .hf_folder import ModelFolderError, export_hf_folder

PAD_TOKEN = "<pad>"
END_TOKEN = "<|end|>"
"""Ends every chat turn, so it is the model's end-of-sequence token."""
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD_TOKEN, END_TOKEN, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

MARKER_FILE = "dynaresize_char_model.json"
"""Written into a built folder with its spec, so a later build can tell it is ours and current."""


def byte_symbols() -> list[str]:
    """The printable stand-in of each byte 0..255 used by byte-level BPE (GPT-2's table): a
    printable Latin-1 byte stands for itself, the others are moved past 255."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    symbols, shifted = {}, 0
    for byte in range(256):
        if byte in kept:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + shifted)
            shifted += 1
    return [symbols[byte] for byte in range(256)]


def build_char_tokenizer(*, context_tokens: int = 512):
    """A `PreTrainedTokenizerFast`: the special tokens first (pad is id 0), then one token per
    byte in byte order (so character `c` of ASCII is id `len(SPECIAL_TOKENS) + ord(c)`)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate((*SPECIAL_TOKENS, *byte_symbols()))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=END_TOKEN,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=context_tokens,
        clean_up_tokenization_spaces=False,
    )


class CharModelSpec(BaseModel):
    """The architecture of a tiny model over the character tokenizer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_type: Literal["qwen2", "llama"] = Field(
        default="qwen2", description="Hugging Face architecture family."
    )
    hidden_size: int = Field(default=64, ge=8, description="Width of the residual stream.")
    intermediate_size: int = Field(default=128, ge=8, description="Width of the MLP.")
    num_layers: int = Field(default=2, ge=1, description="Decoder layers.")
    num_attention_heads: int = Field(default=4, ge=1, description="Query heads.")
    num_key_value_heads: int = Field(default=2, ge=1, description="Key/value heads (GQA).")
    context_tokens: int = Field(
        default=256, ge=16, description="max_position_embeddings: prompt plus response."
    )
    init_seed: int = Field(default=0, description="Seed of the random initialisation.")


def build_char_model(spec: CharModelSpec, tokenizer):
    """A randomly initialised causal LM whose vocabulary is the tokenizer's, in float32."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.for_model(
        spec.model_type,
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.context_tokens,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.init_seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model.eval()


def write_char_model_folder(out_dir: str | Path, spec: CharModelSpec | None = None) -> Path:
    """Build the tokenizer and a model of `spec` and write them as a model folder at `out_dir`
    (which must not exist or be empty)."""
    spec = spec or CharModelSpec()
    tokenizer = build_char_tokenizer(context_tokens=spec.context_tokens)
    model = build_char_model(spec, tokenizer)
    marker = {MARKER_FILE: json.dumps(spec.model_dump(), indent=2, sort_keys=True)}
    return export_hf_folder(model, tokenizer, out_dir, extra_files=marker)


def ensure_char_model_folder(out_dir: str | Path, spec: CharModelSpec | None = None) -> Path:
    """The folder of `spec` at `out_dir`: built when absent, reused when it was built from the
    same spec; a folder holding anything else is an error, never overwritten."""
    spec = spec or CharModelSpec()
    target = Path(out_dir)
    marker = target / MARKER_FILE
    if marker.is_file():
        built = CharModelSpec.model_validate_json(marker.read_text(encoding="utf-8"))
        if built == spec:
            return target
        raise ModelFolderError(
            f"{target}: holds a character model of another spec ({built}); give another folder"
        )
    return write_char_model_folder(target, spec)
