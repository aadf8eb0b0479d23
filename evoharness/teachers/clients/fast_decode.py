"""Incremental decoding of a Qwen3 causal LM over a slot key/value cache: packed prefill, one-token steps.

The model's own weights do the work, each decoder layer's taken as five matrices: the query, key and value
projections stacked into one, the output projection, the MLP's gate and up projections stacked into one, and its down
projection (a decode step of a few rows costs its number of small operations more than its FLOPs: stacking and
fused RMS norms take it from about 45 operations a layer to about 20, with the same logits as the model's modules,
bit for bit in fp32 on the CPU measured, docs/results.md "Jump-forward decoding"). The rotary embedding, the final norm and the LM head are the model's own modules. Every
request owns a slot of a preallocated key/value cache: prompts are prefilled packed, without padding, each against
its own causal context, and a decode step runs one token for every active slot against that slot's own length. What
``generate`` spends on a batch (left padding to its longest prompt, every row kept until its longest completion
ends, per-step cache and mask rebuilding) is gone; the logits differ from ``generate``'s by floating-point summation
order only.

A runner reads the weights when it is made (a model trained afterwards needs a new runner: the decoders make one per
rollout round). It may compute in a lower precision than the weights are stored in (``compute_dtype``): its
matrices, norms and embedding are then copies in that precision (and its key/value cache is kept in it), while the
rotary frequencies, the final norm and the LM head stay the model's own, so the logits come out in the stored
precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


def _apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin)


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer as the runner computes it: its norms' scales and eps, and its projections, the query, key and
    value ones stacked (``qkv``) and the MLP's gate and up ones stacked (``gate_up``); biases where the model has
    them."""

    input_norm: torch.Tensor
    query_norm: torch.Tensor
    key_norm: torch.Tensor
    post_norm: torch.Tensor
    eps: float
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    out: torch.Tensor
    out_bias: torch.Tensor | None
    gate_up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def of(cls, layer: Any, dtype: torch.dtype) -> LayerWeights:
        """``layer``'s weights in ``dtype``: the layer's own tensors where they are in ``dtype`` already, copies
        otherwise; the stacked ones are always copies."""
        attn, mlp = layer.self_attn, layer.mlp

        def take(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.detach().to(dtype)

        def stacked(*tensors: torch.Tensor) -> torch.Tensor:
            return torch.cat([t.detach() for t in tensors]).to(dtype)

        q, k, v, o = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        return cls(take(layer.input_layernorm.weight), take(attn.q_norm.weight), take(attn.k_norm.weight),
                   take(layer.post_attention_layernorm.weight), float(layer.input_layernorm.variance_epsilon),
                   stacked(q.weight, k.weight, v.weight), None if q.bias is None else stacked(q.bias, k.bias, v.bias),
                   take(o.weight), None if o.bias is None else take(o.bias),
                   stacked(mlp.gate_proj.weight, mlp.up_proj.weight), take(mlp.down_proj.weight))


class Qwen3Runner:
    """Prefill and decode passes of a ``Qwen3ForCausalLM`` (full attention, SiLU MLP without biases) from its weights
    as :class:`LayerWeights`, in ``compute_dtype`` (a torch dtype name such as ``"bfloat16"``; None: the weights as
    stored)."""

    def __init__(self, model: Any, compute_dtype: str | None = None) -> None:
        inner, config = model.model, model.config
        self.model = model
        stored = inner.embed_tokens.weight
        self.dtype = torch_dtype(compute_dtype) if compute_dtype is not None else stored.dtype
        self.embedding = stored.detach() if self.dtype == stored.dtype else stored.detach().to(self.dtype)
        self.layers = [LayerWeights.of(layer, self.dtype) for layer in inner.layers]
        self.norm, self.rotary, self.lm_head = inner.norm, inner.rotary_emb, model.lm_head
        self.head_dtype = self.lm_head.weight.dtype
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads
        self.split = [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim]
        self.scaling = float(inner.layers[0].self_attn.scaling)
        self.device = stored.device

    @staticmethod
    def supports(model: Any) -> bool:
        """Whether ``model`` is a plain ``Qwen3ForCausalLM`` with full attention in every layer and a SiLU MLP without
        biases (no adapters, no sliding window): the architecture this runner reproduces."""
        config = getattr(model, "config", None)
        if type(model).__name__ != "Qwen3ForCausalLM" or config is None:
            return False
        layer_types = getattr(config, "layer_types", None) or ["full_attention"]
        return all(kind == "full_attention" for kind in layer_types) and config.hidden_act == "silu" \
            and not getattr(config, "mlp_bias", False)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embedding)

    def _project(self, layer: LayerWeights, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value of ``hidden`` [batch, tokens, hidden] (before the layer's input norm) as
        [batch, heads, tokens, head_dim]."""
        normed = F.rms_norm(hidden, (hidden.shape[-1],), layer.input_norm, layer.eps)
        q, k, v = F.linear(normed, layer.qkv, layer.qkv_bias).split(self.split, dim=-1)
        shape = (*hidden.shape[:-1], -1, self.head_dim)
        q = F.rms_norm(q.view(shape), (self.head_dim,), layer.query_norm, layer.eps).transpose(1, 2)
        k = F.rms_norm(k.view(shape), (self.head_dim,), layer.key_norm, layer.eps).transpose(1, 2)
        return q, k, v.view(shape).transpose(1, 2)

    def _finish_layer(self, layer: LayerWeights, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        hidden = hidden + F.linear(attended, layer.out, layer.out_bias)
        normed = F.rms_norm(hidden, (hidden.shape[-1],), layer.post_norm, layer.eps)
        gate, up = F.linear(normed, layer.gate_up).chunk(2, dim=-1)
        return hidden + F.linear(F.silu(gate) * up, layer.down)

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
        hidden = self._embed(ids)
        cos, sin = self.rotary(hidden, torch.tensor([positions], device=self.device))
        for index, layer in enumerate(self.layers):
            q, k, v = self._project(layer, hidden)
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
        return self.extend(state, [[token] for token in tokens.view(rows).tolist()])

    def extend(self, state: DecodeState, runs: list[list[int]]) -> torch.Tensor:
        """The tokens ``runs[i]`` (at least one) appended to slot ``i`` of ``0..rows-1`` in one pass: their keys and
        values written, and the logits of the token after each slot's last one returned [rows, vocab]. One token a
        slot is a decode step; more are tokens the constraint forced. The tokens go through the projections and the
        MLP packed (each once); only attention takes each slot's queries padded to the longest run."""
        rows, width = len(runs), max(len(run) for run in runs)
        lengths = state.lengths[:rows]
        state.reserve(int(lengths.max()) + width)
        counts = torch.tensor([len(run) for run in runs], device=self.device)
        slot, offset, positions = torch.arange(rows, device=self.device), None, lengths
        if width > 1:  # each packed token's slot, its place in the slot's run, and its position
            slot = slot.repeat_interleave(counts)
            offset = torch.arange(len(slot), device=self.device) - (counts.cumsum(0) - counts).repeat_interleave(counts)
            positions = lengths[slot] + offset
        hidden = self._embed(torch.tensor([[token for run in runs for token in run]], device=self.device))
        cos, sin = self.rotary(hidden, positions.view(1, -1))
        keys_width = int(lengths.max()) + width
        # query j of slot i (padded) sees the keys up to its own position lengths[i] + j
        query_positions = lengths.view(rows, 1) + torch.arange(width, device=self.device).view(1, width)
        mask = (torch.arange(keys_width, device=self.device).view(1, 1, keys_width)
                <= query_positions.view(rows, width, 1)).view(rows, 1, 1, width, keys_width)
        if width > 1:  # one query token: the mask broadcasts over the group's heads
            mask = mask.expand(rows, 1, self.groups, width, keys_width)
        mask = mask.reshape(rows, 1, -1, keys_width)
        for layer_index, layer in enumerate(self.layers):
            q, k, v = self._project(layer, hidden)  # [1, heads, tokens, head_dim]
            q, k = _apply_rotary(q, k, cos, sin)
            keys, values = state.keys[layer_index], state.values[layer_index]
            keys[slot, :, positions] = k[0].transpose(0, 1)
            values[slot, :, positions] = v[0].transpose(0, 1)
            queries = q[0].transpose(0, 1)  # [tokens, heads, head_dim]
            if width > 1:
                padded = queries.new_zeros(rows, width, self.heads, self.head_dim)
                padded[slot, offset] = queries
                queries = padded.transpose(1, 2)
            # the query heads that share a key/value head attend as one group, without copies
            grouped = queries.reshape(rows, self.kv_heads, self.groups * width, self.head_dim)
            out = F.scaled_dot_product_attention(grouped, keys[:rows, :, :keys_width], values[:rows, :, :keys_width],
                                                 attn_mask=mask, scale=self.scaling)
            if width > 1:
                out = out.view(rows, self.heads, width, self.head_dim).transpose(1, 2)[slot, offset]
            hidden = self._finish_layer(layer, hidden, out.reshape(1, -1, self.heads * self.head_dim))
        state.lengths[:rows] += counts
        return self._logits(hidden[0, counts.cumsum(0) - 1] if width > 1 else hidden[0])

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The next-token logits of final hidden states, through the model's own final norm and LM head."""
        return self.lm_head(self.norm(hidden.to(self.head_dtype)))


def torch_dtype(name: str) -> torch.dtype:
    """The floating-point torch dtype called ``name`` (``"bfloat16"``, ``"float16"``, ``"float32"``)."""
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in dtypes:
        raise ValueError(f"{name!r} is not a torch dtype to compute in: one of {sorted(dtypes)}")
    return dtypes[name]


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
