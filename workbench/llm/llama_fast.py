"""A Llama forward pass with few ops, for the small models GRPO trains (on a CPU, and in a GPU's graphs).

``transformers``' Llama forward spends most of a small model's time outside the arithmetic:
per call it builds a 4-D mask, runs output-capturing and deprecation wrappers, a
``Cache`` object's bookkeeping and ~50 ops a layer. For the notebook's 2-layer model a
decode step of 128 rows took 2.7 ms there, of which the matmuls are ~0.3 ms. This module
computes the same function with the model's own modules (embedding, projections, norms,
its rotary embedding, ``lm_head``) and nothing else: one boolean mask per call, the keys
and values as plain tensors. The numbers equal ``transformers``' eager attention's up to
float rounding (the tests compare logits, sampled tokens and gradients).

It applies to a ``LlamaForCausalLM`` with the plain architecture (SiLU MLP, no biases,
no attention dropout, no sliding window, not wrapped by ``peft``), without gradient
checkpointing or forward hooks on the blocks it steps over: :func:`supports` says.
Everything else runs ``transformers``' own forward. On a GPU the same holds for the graphs
GRPO replays: a kernel there costs a few microseconds however small, so fewer ops is
fewer microseconds (:func:`decode_step` and :class:`StaticKV` are the sampling loop's
graph-safe form; :func:`_attend` fuses attention into one kernel there).

Example:
    >>> import torch
    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> model = tiny_causal_lm(char_tokenizer(), context=16, seed=0)
    >>> ids = torch.tensor([[5, 6, 7]])
    >>> mask = torch.ones_like(ids, dtype=torch.bool)
    >>> logits, kv = forward(model, ids, torch.arange(3)[None], mask)
    >>> expected = model(input_ids=ids).logits
    >>> bool(torch.allclose(logits, expected, atol=1e-5)), len(kv), tuple(kv[0][0].shape)
    (True, 2, (1, 4, 3, 16))
"""

from __future__ import annotations

import contextlib
import os

import torch

__all__ = ["supports", "forward", "decode_step", "StaticKV", "select_rows", "KV", "fast_path"]

#: per layer, ``(keys, values)`` of shape ``[B, kv heads, S, head dim]``
KV = list

#: the GPU's forms (True: attention by ``scaled_dot_product_attention``, ``rms_norm``, the
#: rotary embedding in three ops), the CPU's (False: as measured fastest there), or by the
#: device (None); the numbers are the same up to float rounding (the tests compare both)
FUSED: bool | None = None

#: ``WORKBENCH_FAST_LLAMA=0`` turns this path off (to compare, or should a model misbehave on it)
_ENABLED = os.environ.get("WORKBENCH_FAST_LLAMA", "1") != "0"


@contextlib.contextmanager
def fast_path(on: bool):
    """This path on (``True``) or off (``False``, ``transformers``' own forward everywhere)
    for the block, in this process; as it was after. How a benchmark or a test compares
    the two sides in one process (``WORKBENCH_FAST_LLAMA=0`` sets it off from the start).

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> model = tiny_causal_lm(char_tokenizer(), context=16)
    >>> with fast_path(False):
    ...     supports(model)
    False
    >>> supports(model)
    True
    """
    global _ENABLED
    before, _ENABLED = _ENABLED, bool(on)
    try:
        yield
    finally:
        _ENABLED = before


def supports(model) -> bool:
    """Whether :func:`forward` computes ``model``'s function: a plain ``LlamaForCausalLM``.

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> supports(tiny_causal_lm(char_tokenizer(), context=16)), supports(torch.nn.Linear(2, 2))
    (True, False)
    """
    if not _ENABLED or type(model).__name__ != "LlamaForCausalLM":
        return False
    from transformers import LlamaForCausalLM

    if type(model) is not LlamaForCausalLM:  # a subclass may change the forward; peft wraps it in another type
        return False
    config = model.config
    return (
        getattr(config, "hidden_act", None) == "silu"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and not getattr(config, "attention_dropout", 0.0)
        and getattr(config, "pretraining_tp", 1) in (None, 1)
        and getattr(config, "sliding_window", None) is None
        and hasattr(model.model, "rotary_emb")
        and hasattr(model, "lm_head")
        # the user asked for transformers' own behaviour: recomputed activations, or hooks on
        # modules this forward does not call (hooks on the ones it calls still run)
        and not getattr(model.model, "gradient_checkpointing", False)
        and not _hooked(model)
    )


def _hooked(model) -> bool:
    """Whether a forward hook sits on a module :func:`forward` steps over (the model, its
    decoder, layers, attention and MLP blocks), which it would silently not call."""
    skipped = [model, model.model]
    for layer in model.model.layers:
        skipped += [layer, layer.self_attn, layer.mlp]
    return any(m._forward_hooks or m._forward_pre_hooks for m in skipped)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, as ``transformers``' ``apply_rotary_pos_emb`` (halves rotated)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(scores, -1)`` in four ops: on the CPU torch's kernel is slow for rows as
    short as attention's here (a [128, 4, 3, 9] batch: 272 µs against 47, backward included
    402 against 239). The shift is detached: the result does not depend on it."""
    shifted = (scores - scores.amax(-1, keepdim=True).detach()).exp()
    return shifted / shifted.sum(-1, keepdim=True)


def forward(
    model, ids: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor, past: KV | None = None
) -> tuple[torch.Tensor, KV]:
    """Logits ``[B, T, V]`` of ``ids`` ``[B, T]`` at ``positions``, attending causally to
    ``past``'s keys and then their own; ``key_mask`` ``[B, S]`` (bool, ``S`` = past + T)
    marks the real keys (False: padding). Returns the logits and every layer's keys and
    values over all ``S`` positions (``past`` extended), with gradients when enabled.

    A query with no real key to see (a left-padding position) attends uniformly, as in
    ``transformers``' eager attention (every score at the same floor); nothing reads it."""
    width, total = ids.shape[1], key_mask.shape[1]
    query_at = torch.arange(total - width, total, device=ids.device)[:, None]
    key_at = torch.arange(total, device=ids.device)[None]
    visible = (key_at <= query_at)[None] & key_mask[:, None, :].bool()
    kv: KV = []

    def keys_and_values(index, k, v):
        if past is not None:
            k, v = torch.cat([past[index][0], k], 2), torch.cat([past[index][1], v], 2)
        kv.append((k, v))
        return k, v

    return _layers(model, ids, positions, visible, keys_and_values), kv


class StaticKV:
    """Every layer's keys and values for ``batch`` rows over ``length`` slots, written in
    place, and the next slot to write as a device scalar: what a CUDA graph of a decode
    step replays over (nothing in it is a Python number that a replay would freeze).

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> model = tiny_causal_lm(char_tokenizer(), context=16, seed=0)
    >>> kv = StaticKV(model, batch=2, length=6)
    >>> len(kv.keys), tuple(kv.keys[0].shape), int(kv.filled)
    (2, (2, 4, 6, 16), 0)
    """

    def __init__(self, model, batch: int, length: int) -> None:
        weight = model.model.embed_tokens.weight
        config, attention = model.config, model.model.layers[0].self_attn
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        shape = (batch, heads, length, attention.head_dim)
        self.keys = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.model.layers]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.filled = torch.zeros((), dtype=torch.long, device=weight.device)

    def fill(self, prefix: KV, rows: torch.Tensor) -> None:
        """Slots ``0 … P-1`` from a prefill's keys and values (``[R, heads, P, dim]`` a
        layer), row ``i`` taken from row ``rows[i]``; the next write goes to slot ``P``."""
        width = prefix[0][0].shape[2]
        for (k, v), keys, values in zip(prefix, self.keys, self.values):
            keys[:, :, :width].copy_(k.index_select(0, rows))
            values[:, :, :width].copy_(v.index_select(0, rows))
        self.filled.fill_(width)


def decode_step(
    model, ids: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor, kv: StaticKV
) -> torch.Tensor:
    """Logits ``[B, 1, V]`` of one new token a row (``ids`` ``[B, 1]``) at ``positions``:
    its keys and values are written to slot ``kv.filled``, which then moves on; it attends
    to the slots before it and itself where ``key_mask`` ``[B, length]`` says real. The
    numbers of :func:`forward` over the same keys, up to float rounding (the slots not yet
    written weigh exactly 0)."""
    slot = kv.filled.reshape(1)
    key_at = torch.arange(key_mask.shape[1], device=ids.device)
    visible = (key_at <= slot)[None, None, :] & key_mask[:, None, :].bool()

    def keys_and_values(index, k, v):
        kv.keys[index].index_copy_(2, slot, k)
        kv.values[index].index_copy_(2, slot, v)
        return kv.keys[index], kv.values[index]

    logits = _layers(model, ids, positions, visible, keys_and_values)
    kv.filled.add_(1)
    return logits


def _layers(model, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor, keys_and_values) -> torch.Tensor:
    """The decoder over ``ids`` where ``visible`` ``[B, T, S]`` says which keys each query
    sees; ``keys_and_values(layer, k, v)`` stores a layer's new keys and values and returns
    all ``S`` it attends over. Returns the logits."""
    inner = model.model
    batch, width = ids.shape
    x = inner.embed_tokens(ids)
    fused = _fused(x)
    cos, sin = inner.rotary_emb(x, positions)
    cos, sin = cos[:, None], sin[:, None]  # over the heads
    rotate = _rotation(cos, sin) if fused else (lambda x: _rotate(x, cos, sin))
    norm = _rms_norm if fused else (lambda module, x: module(x))
    bias = torch.zeros(visible.shape, dtype=x.dtype, device=x.device).masked_fill_(~visible, torch.finfo(x.dtype).min)
    bias = bias[:, None]  # [B, 1, T, S]: the same for every head
    for index, layer in enumerate(inner.layers):
        attention = layer.self_attn
        h = norm(layer.input_layernorm, x)
        shape = (batch, width, -1, attention.head_dim)
        q = rotate(attention.q_proj(h).view(shape).transpose(1, 2))
        k = rotate(attention.k_proj(h).view(shape).transpose(1, 2))
        v = attention.v_proj(h).view(shape).transpose(1, 2)
        k, v = keys_and_values(index, k, v)
        groups = attention.num_key_value_groups
        if groups > 1:  # grouped-query attention: each key/value head serves `groups` query heads
            k, v = _repeat_heads(k, groups), _repeat_heads(v, groups)
        out = _attend(q, k, v, bias, attention.scaling, fused).transpose(1, 2).reshape(batch, width, -1)
        x = x + attention.o_proj(out)
        mlp = layer.mlp
        h = norm(layer.post_attention_layernorm, x)
        x = x + mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
    return model.lm_head(norm(inner.norm, x))


def _fused(x: torch.Tensor) -> bool:
    """Whether :func:`_layers` takes the GPU's forms for ``x``'s device (:data:`FUSED`).
    On a GPU a kernel costs a few microseconds however small (a graph replays them all),
    so fewer kernels is less time; on the CPU the written-out forms measured faster for
    rows this short."""
    return x.is_cuda if FUSED is None else FUSED


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scaling: float, fused: bool
) -> torch.Tensor:
    """Attention of ``q`` over ``k``, ``v`` with the additive ``bias``: one kernel
    (``scaled_dot_product_attention``) where ``fused``, else written out (~10 kernels), the
    softmax in float32 as transformers' eager attention."""
    if fused:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scaling)
    weights = _softmax(((q @ k.transpose(2, 3)) * scaling + bias).float())
    return weights.to(v.dtype) @ v


def _rms_norm(module, x: torch.Tensor) -> torch.Tensor:
    """A ``LlamaRMSNorm`` by ``torch.nn.functional.rms_norm`` (its six ops in one call)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), module.weight, module.variance_epsilon)


def _rotation(cos: torch.Tensor, sin: torch.Tensor):
    """:func:`_rotate` in three ops a call: ``rotate_half(x) · sin`` is ``roll(x, half) ·
    sin'`` with ``sin'`` = ``(-sin₁, sin₂)``, made once for every layer."""
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), -1)
    return lambda x: torch.addcmul(x * cos, x.roll(half, -1), signed)


def _repeat_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``x.repeat_interleave(groups, 1)`` by a view and a copy (nothing for the host to
    read: a CUDA graph records it)."""
    batch, heads, length, dim = x.shape
    return x[:, :, None].expand(batch, heads, groups, length, dim).reshape(batch, heads * groups, length, dim)


def select_rows(kv: KV, rows: torch.Tensor) -> KV:
    """``kv`` with batch row ``i`` taken from row ``rows[i]``: a repeated prompt's keys and
    values copied to each completion that continues it (gradients flow back to the prompt).
    On a GPU by ``index_select``, whose backward is one ``index_add_`` that the update's
    graph records (advanced indexing's backward sorts the indices); on the CPU by ``k[rows]``,
    35 µs sooner a call with its backward at the notebook's sizes."""
    if kv and kv[0][0].is_cuda:
        return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in kv]
    return [(k[rows], v[rows]) for k, v in kv]
