"""A lean forward pass over a Hugging Face Llama-family model, reading a static KV cache.

Hugging Face's own forward is built for flexibility; per decode step it spends more time in
Python than on the GPU. This module runs the same modules (projections, norms, MLP, embedding,
LM head: the model's own objects, so new weights are seen at once) with an attention of its own
over a preallocated cache of shape [rows, kv heads, max_seq_len, head dim] per layer. Rows are
sequences; a row's tokens sit at their true positions, so prompts need no left padding and
RoPE sees the same positions as in training.

The decode step has fixed shapes and no host synchronisation, so it can be captured in a CUDA
graph (see `sampler.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import torch
from transformers import PreTrainedModel

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


class UnsupportedModelError(ValueError):
    """The sampler's lean decoder does not know this architecture."""


class StaticKVCache:
    """Keys and values of every layer for `max_rows` sequences of up to `max_seq_len` tokens."""

    def __init__(
        self,
        *,
        num_layers: int,
        max_rows: int,
        num_kv_heads: int,
        max_seq_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (max_rows, num_kv_heads, max_seq_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.max_rows = max_rows
        self.max_seq_len = max_seq_len

    def compact(self, keep_rows: torch.Tensor, *, used_len: int) -> None:
        """Move rows `keep_rows` (in order) to the front, so the active batch is rows [0, n)."""
        count = keep_rows.numel()
        for cache in (*self.keys, *self.values):
            cache[:count, :, :used_len] = cache[keep_rows, :, :used_len]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


Block = Callable[[torch.Tensor], torch.Tensor]


class _Attention(Protocol):
    """What the decoder reads of a Llama-family attention module."""

    q_proj: Block
    k_proj: Block
    v_proj: Block
    o_proj: Block
    head_dim: int
    scaling: float


class _DecoderLayer(Protocol):
    """What the decoder reads of a Llama-family decoder layer (the supported model types all
    have these submodules; torch types every submodule attribute as `Tensor | Module`)."""

    self_attn: _Attention
    input_layernorm: Block
    post_attention_layernorm: Block
    mlp: Block


class LeanDecoder:
    """Prefill and decode steps of a Llama-family `PreTrainedModel` over a `StaticKVCache`."""

    def __init__(self, model: PreTrainedModel, *, max_rows: int, max_seq_len: int) -> None:
        config = model.config
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedModelError(
                f"model_type {config.model_type!r}: the sampler supports {SUPPORTED_MODEL_TYPES}"
            )
        self.model = model
        self.layers = [cast(_DecoderLayer, layer) for layer in model.model.layers]
        attn = self.layers[0].self_attn
        window = getattr(attn, "sliding_window", None)
        if window is not None and max_seq_len > window:
            raise UnsupportedModelError(
                f"sliding-window attention ({window}) shorter than max_seq_len {max_seq_len}"
            )
        self.head_dim = attn.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.scaling = attn.scaling
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.cache = StaticKVCache(
            num_layers=len(self.layers),
            max_rows=max_rows,
            num_kv_heads=self.num_kv_heads,
            max_seq_len=max_seq_len,
            head_dim=self.head_dim,
            dtype=self.dtype,
            device=self.device,
        )
        self.cos, self.sin = self._rope_tables(max_seq_len)

    def _rope_tables(self, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for every position, from the model's own rotary module (any rope type)."""
        positions = torch.arange(max_seq_len, device=self.device).unsqueeze(0)
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            cos, sin = self.model.model.rotary_emb(probe, positions)
        return cos[0], sin[0]

    @torch.no_grad()
    def prefill(
        self, input_ids: torch.Tensor, lengths: torch.Tensor, *, first_row: int = 0
    ) -> torch.Tensor:
        """Run right-padded prompts [rows, P] into cache rows [first_row, first_row + rows);
        returns the float32 logits [rows, vocab] after each prompt's last real token."""
        rows, prompt_len = input_ids.shape
        cache_rows = slice(first_row, first_row + rows)
        positions = torch.arange(prompt_len, device=self.device)
        key_pos = positions.view(1, 1, prompt_len)
        mask = (key_pos <= positions.view(1, prompt_len, 1)) & (key_pos < lengths.view(rows, 1, 1))
        hidden = self.model.model.embed_tokens(input_ids)
        cos, sin = self.cos[:prompt_len].unsqueeze(0), self.sin[:prompt_len].unsqueeze(0)
        for index, layer in enumerate(self.layers):
            hidden = self._layer(
                layer,
                index,
                hidden,
                cos=cos,
                sin=sin,
                mask=mask,
                write=lambda cache, new: cache[cache_rows, :, :prompt_len].copy_(new),
                attn_len=prompt_len,
            )
        last = hidden[torch.arange(rows, device=self.device), lengths - 1]
        return self._logits(last)

    @torch.no_grad()
    def decode(
        self, tokens: torch.Tensor, positions: torch.Tensor, *, attn_len: int
    ) -> torch.Tensor:
        """One token per row for rows [0, len(tokens)): `tokens` sit at `positions`. Attends
        over cache positions [0, attn_len). Returns float32 logits [rows, vocab]."""
        rows = tokens.shape[0]
        row_index = torch.arange(rows, device=self.device)
        mask = (torch.arange(attn_len, device=self.device).view(1, 1, attn_len)) <= positions.view(
            rows, 1, 1
        )
        hidden = self.model.model.embed_tokens(tokens).unsqueeze(1)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)

        def write(cache: torch.Tensor, new: torch.Tensor) -> None:
            cache[row_index, :, positions] = new[:, :, 0]

        for index, layer in enumerate(self.layers):
            hidden = self._layer(
                layer, index, hidden, cos=cos, sin=sin, mask=mask, write=write, attn_len=attn_len
            )
        return self._logits(hidden[:, 0])

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.model.model.norm(hidden)).float()

    def _layer(
        self,
        layer: _DecoderLayer,
        index: int,
        hidden: torch.Tensor,
        *,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        write: Callable[[torch.Tensor, torch.Tensor], object],
        attn_len: int,
    ) -> torch.Tensor:
        """One decoder layer on hidden [rows, steps, hidden]; `write` stores the new keys and
        values of layer `index` in the cache."""
        rows, steps, _ = hidden.shape
        attn = layer.self_attn
        normed = layer.input_layernorm(hidden)
        query = attn.q_proj(normed).view(rows, steps, self.num_heads, self.head_dim)
        key = attn.k_proj(normed).view(rows, steps, self.num_kv_heads, self.head_dim)
        value = attn.v_proj(normed).view(rows, steps, self.num_kv_heads, self.head_dim)
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        if q_norm is not None and k_norm is not None:  # Qwen3 normalises queries, keys per head
            query, key = q_norm(query), k_norm(key)
        query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = query * cos + _rotate_half(query) * sin
        key = key * cos + _rotate_half(key) * sin
        write(self.cache.keys[index], key)
        write(self.cache.values[index], value)
        if steps > 1:  # prefill: the prompt's own keys and values, whatever its cache rows
            all_keys, all_values = key, value
        else:
            all_keys = self.cache.keys[index][:rows, :, :attn_len]
            all_values = self.cache.values[index][:rows, :, :attn_len]
        out = self._attend(query, all_keys, all_values, mask)
        hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(rows, steps, -1))
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def _attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Grouped-query attention: query [r, H, t, D], keys/values [r, Hkv, s, D], mask
        [r, t, s] (True = may attend). Softmax in float32."""
        rows, _, steps, _ = query.shape
        group = self.num_heads // self.num_kv_heads
        grouped = query.reshape(rows, self.num_kv_heads, group * steps, self.head_dim)
        scores = torch.matmul(grouped, keys.transpose(-1, -2)).float() * self.scaling
        scores = scores.view(rows, self.num_kv_heads, group, steps, -1)
        scores = scores.masked_fill(~mask.view(rows, 1, 1, steps, -1), float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(values.dtype)
        out = torch.matmul(probs.view(rows, self.num_kv_heads, group * steps, -1), values)
        return out.view(rows, self.num_heads, steps, self.head_dim)
