"""Incremental decoding of a Qwen3 causal LM over a slot key/value cache: packed prefill, one-token steps.

The model's own modules and weights do the work (norms, projections, rotary embedding, MLP, LM head); only the
attention bookkeeping is done here. Every request owns a slot of a preallocated key/value cache: prompts are
prefilled packed, without padding, each against its own causal context, and a decode step runs one token for every
active slot against that slot's own length. What ``generate`` spends on a batch (left padding to its longest prompt,
every row kept until its longest completion ends, per-step cache and mask rebuilding) is gone; the logits differ
from ``generate``'s by floating-point summation order only.

A runner may compute in a lower precision than the weights are stored in (``compute_dtype``): it then decodes with a
copy of the embedding and decoder layers in that precision (and keeps its key/value cache in it), while the rotary
frequencies, the final norm and the LM head stay the model's own, so the logits come out in the stored precision.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


def _apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin)


class Qwen3Runner:
    """Prefill and decode passes of a ``Qwen3ForCausalLM`` (full attention) through its own modules, or through
    copies of its embedding and layers in ``compute_dtype`` (a torch dtype name such as ``"bfloat16"``; None: the
    weights as stored)."""

    def __init__(self, model: Any, compute_dtype: str | None = None) -> None:
        inner, config = model.model, model.config
        self.model = model
        self.layers, self.embed = list(inner.layers), inner.embed_tokens
        self.norm, self.rotary, self.lm_head = inner.norm, inner.rotary_emb, model.lm_head
        self.head_dtype = self.lm_head.weight.dtype
        if compute_dtype is not None and torch_dtype(compute_dtype) != self.embed.weight.dtype:
            self.layers, self.embed = _copies([*self.layers, self.embed], torch_dtype(compute_dtype))
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads
        self.scaling = float(self.layers[0].self_attn.scaling)
        self.dtype, self.device = self.embed.weight.dtype, self.embed.weight.device

    @staticmethod
    def supports(model: Any) -> bool:
        """Whether ``model`` is a plain ``Qwen3ForCausalLM`` with full attention in every layer (no adapters, no
        sliding window): the architecture this runner reproduces."""
        config = getattr(model, "config", None)
        if type(model).__name__ != "Qwen3ForCausalLM" or config is None:
            return False
        layer_types = getattr(config, "layer_types", None) or ["full_attention"]
        return all(kind == "full_attention" for kind in layer_types)

    def _project(self, layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value of ``hidden`` [batch, tokens, hidden] as [batch, heads, tokens, head_dim]."""
        attn = layer.self_attn
        shape = (*hidden.shape[:-1], -1, self.head_dim)
        q = attn.q_norm(attn.q_proj(hidden).view(shape)).transpose(1, 2)
        k = attn.k_norm(attn.k_proj(hidden).view(shape)).transpose(1, 2)
        v = attn.v_proj(hidden).view(shape).transpose(1, 2)
        return q, k, v

    def _finish_layer(self, layer: Any, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        hidden = hidden + layer.self_attn.o_proj(attended)
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def prefill(self, state: DecodeState, slots: list[int], prompts: list[list[int]],
                starts: list[int] | None = None) -> torch.Tensor:
        """Write the keys and values of ``prompts`` into ``slots`` (each from position ``starts[i]``: the slot
        already holds the earlier ones) and return the logits of each prompt's last token [len(prompts), vocab]."""
        starts = starts or [0] * len(prompts)
        spans: list[tuple[int, int, int]] = []
        tokens: list[int] = []
        positions: list[int] = []
        offset = 0
        for prompt, start in zip(prompts, starts, strict=True):
            rest = prompt[start:]
            spans.append((offset, offset + len(rest), start))
            tokens.extend(rest)
            positions.extend(range(start, len(prompt)))
            offset += len(rest)
        ids = torch.tensor([tokens], device=self.device)
        hidden = self.embed(ids)
        cos, sin = self.rotary(hidden, torch.tensor([positions], device=self.device))
        for index, layer in enumerate(self.layers):
            q, k, v = self._project(layer, layer.input_layernorm(hidden))
            q, k = _apply_rotary(q, k, cos, sin)
            attended = torch.empty(1, offset, self.heads, self.head_dim, dtype=q.dtype, device=self.device)
            keys, values = state.keys[index], state.values[index]
            for (a, b, start), slot in zip(spans, slots, strict=True):
                end = start + (b - a)
                keys[slot, :, start:end] = k[0, :, a:b]
                values[slot, :, start:end] = v[0, :, a:b]
                key = keys[slot, :, :end].repeat_interleave(self.groups, dim=0).unsqueeze(0)
                value = values[slot, :, :end].repeat_interleave(self.groups, dim=0).unsqueeze(0)
                if start == 0:
                    out = F.scaled_dot_product_attention(q[:, :, a:b], key, value, is_causal=True,
                                                         scale=self.scaling)
                else:  # the query rows sit at the end of the key rows: a bottom-right causal mask
                    mask = torch.ones(b - a, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
                    out = F.scaled_dot_product_attention(q[:, :, a:b], key, value, attn_mask=mask,
                                                         scale=self.scaling)
                attended[0, a:b] = out[0].transpose(0, 1)
            hidden = self._finish_layer(layer, hidden, attended.view(1, offset, -1))
        last = hidden[0, [b - 1 for _, b, _ in spans]]
        for slot, prompt in zip(slots, prompts, strict=True):
            state.lengths[slot] = len(prompt)
        return self._logits(last)

    def decode(self, state: DecodeState, rows: int, tokens: torch.Tensor) -> torch.Tensor:
        """One token for each of the slots ``0..rows-1`` (``tokens`` [rows]): append its keys and values and return
        the logits of the next token [rows, vocab]."""
        lengths = state.lengths[:rows]
        hidden = self.embed(tokens.view(rows, 1))
        cos, sin = self.rotary(hidden, lengths.view(rows, 1))
        width = int(lengths.max()) + 1
        mask = (torch.arange(width, device=self.device).view(1, width) <= lengths.view(rows, 1)).view(rows, 1, 1,
                                                                                                    width)
        index = torch.arange(rows, device=self.device)
        for layer_index, layer in enumerate(self.layers):
            q, k, v = self._project(layer, layer.input_layernorm(hidden))
            q, k = _apply_rotary(q, k, cos, sin)
            keys, values = state.keys[layer_index], state.values[layer_index]
            keys[index, :, lengths] = k[:, :, 0]
            values[index, :, lengths] = v[:, :, 0]
            # one query token: the query heads that share a key/value head attend as one group, without copies
            grouped = q.reshape(rows, self.kv_heads, self.groups, self.head_dim)
            out = F.scaled_dot_product_attention(grouped, keys[:rows, :, :width], values[:rows, :, :width],
                                                 attn_mask=mask, scale=self.scaling)
            hidden = self._finish_layer(layer, hidden, out.reshape(rows, 1, self.heads * self.head_dim))
        state.lengths[:rows] += 1
        return self._logits(hidden[:, 0])

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The next-token logits of final hidden states, through the model's own final norm and LM head."""
        return self.lm_head(self.norm(hidden.to(self.head_dtype)))


def torch_dtype(name: str) -> torch.dtype:
    """The floating-point torch dtype called ``name`` (``"bfloat16"``, ``"float16"``, ``"float32"``)."""
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in dtypes:
        raise ValueError(f"{name!r} is not a torch dtype to compute in: one of {sorted(dtypes)}")
    return dtypes[name]


def _copies(modules: list[Any], dtype: torch.dtype) -> tuple[list[Any], Any]:
    """Frozen copies of the decoder layers and the embedding (the last of ``modules``) in ``dtype``."""
    copied = [copy.deepcopy(module).to(dtype).requires_grad_(False) for module in modules]
    return copied[:-1], copied[-1]


@dataclass
class DecodeState:
    """The key/value cache of ``slots`` requests: per layer [slots, kv_heads, capacity, head_dim], and each slot's
    length (the tokens it holds)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    lengths: torch.Tensor

    @classmethod
    def empty(cls, runner: Qwen3Runner, slots: int, capacity: int) -> DecodeState:
        def zeros() -> torch.Tensor:
            return torch.zeros(slots, runner.kv_heads, capacity, runner.head_dim, dtype=runner.dtype,
                               device=runner.device)

        layers = len(runner.layers)
        return cls([zeros() for _ in range(layers)], [zeros() for _ in range(layers)],
                   torch.zeros(slots, dtype=torch.long, device=runner.device))

    @property
    def capacity(self) -> int:
        return int(self.keys[0].shape[2])

    def reserve(self, capacity: int) -> None:
        """Grow every slot to hold at least ``capacity`` tokens (doubling, so growth is rare)."""
        if capacity <= self.capacity:
            return
        size = max(capacity, 2 * self.capacity)
        for cache in (self.keys, self.values):
            for index, tensor in enumerate(cache):
                grown = tensor.new_zeros(*tensor.shape[:2], size, tensor.shape[3])
                grown[:, :, :tensor.shape[2]] = tensor
                cache[index] = grown

    def move(self, source: int, target: int) -> None:
        """Copy slot ``source``'s tokens into slot ``target`` (compaction: active slots stay ``0..n-1``)."""
        length = int(self.lengths[source])
        for cache in (self.keys, self.values):
            for tensor in cache:
                tensor[target, :, :length] = tensor[source, :, :length]
        self.lengths[target] = length

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Slot ``target`` starts with the first ``length`` tokens of slot ``source``."""
        for cache in (self.keys, self.values):
            for tensor in cache:
                tensor[target, :, :length] = tensor[source, :, :length]
        self.lengths[target] = length
