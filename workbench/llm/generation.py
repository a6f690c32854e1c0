"""Batched sampling from a causal LM with a KV cache, and the log-probabilities GRPO trains on.

Prompts are left-padded to one width ``P``; completions are written into a fixed width
``C = max_new_tokens`` (right-padded with the pad id after ``<eos>``), so every replica's
batch has the same shape and gathers along the batch axis. ``completion_mask`` marks the
tokens a completion really has, ``<eos>`` included: only they carry loss.

Example:
    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> tok = char_tokenizer()
    >>> model = tiny_causal_lm(tok, context=32, seed=0)
    >>> batch = tok(["1+2=", "10+20="], padding=True, return_tensors="pt")
    >>> out = sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=4,
    ...              eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, seed=0)
    >>> tuple(out.tokens.shape), tuple(out.completion_mask.shape), tuple(out.logp.shape)
    ((2, 4), (2, 4), (2, 4))
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass

import torch

from workbench.kernels.cuda_graphs import graphed_call
from workbench.llm import llama_fast

__all__ = [
    "Completions",
    "sample",
    "sample_static",
    "sequence_logp",
    "scorer",
    "distinct_prompts",
    "positions",
    "model_device",
    "graph_safe",
    "graphable_prompts",
]

#: each model's static KV caches (transformers' StaticCache, or llama_fast's StaticKV for a plain
#: Llama), by (batch, prompt width + max_new_tokens)
_CACHES: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()
#: models whose static path failed once (a model without StaticCache support): dynamic from then on
_DYNAMIC_ONLY: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def model_device(model) -> torch.device:
    """Where ``model``'s parameters are (``replica.device`` once a cell moved it there): the
    batches go there, so callers may pass CPU tensors to a model on a GPU."""
    return next(model.parameters()).device


@dataclass
class Completions:
    """What :func:`sample` returns: ``tokens`` ``[B, C]`` (pad after ``<eos>``),
    ``completion_mask`` ``[B, C]`` (1 on real completion tokens, ``<eos>`` included) and
    ``logp`` ``[B, C]``: each sampled token's log-probability under the sampling
    distribution (``logits / temperature``, before top-p), 0 where the mask is 0."""

    tokens: torch.Tensor
    completion_mask: torch.Tensor
    logp: torch.Tensor


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on each row's first real token (left padding skipped)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _pick(logits: torch.Tensor, temperature: float, top_p: float, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return it and its log-probability at ``temperature``."""
    if temperature == 0:  # greedy: evaluation
        token = logits.argmax(-1)
        return token, torch.zeros(token.shape, dtype=torch.float32, device=token.device)
    logp_all = torch.log_softmax(logits.float() / temperature, -1)
    probs = logp_all.exp()
    if top_p < 1.0:
        # the nucleus: the most likely tokens whose mass reaches top_p (the top one always)
        sorted_p, order = probs.sort(-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p > top_p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1)


@torch.no_grad()
def sample(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    cuda_graphs: bool = True,
) -> Completions:
    """Continue each left-padded prompt by up to ``max_new_tokens`` sampled tokens, stopping
    a row at ``<eos>`` and the batch once every row has stopped. One forward over the
    prompts fills the KV cache; each new token is one forward of width 1. ``temperature``
    0 is greedy. A prompt that repeats (GRPO's groups) is prefilled once and its cache
    copied. ``seed`` draws from a private generator (else torch's global one). The
    prompts go to the model's device; what comes back is there too. On a GPU (with
    ``cuda_graphs``) the forwards replay CUDA graphs over a static KV cache
    (:func:`sample_static`); a model that cannot use one falls back to this eager loop."""
    device = model_device(model)
    failed = None
    if cuda_graphs and device.type == "cuda" and model not in _DYNAMIC_ONLY:
        try:
            return sample_static(
                model,
                prompt_ids,
                prompt_mask,
                max_new_tokens=max_new_tokens,
                eos_id=eos_id,
                pad_id=pad_id,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                graphs=True,
            )
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001  (the eager loop below is always right)
            failed = exc
    prompt_ids, mask = prompt_ids.to(device), prompt_mask.to(device).long()
    first, advance = _prefill(model, prompt_ids, mask)
    completions = _sampling_loop(
        first, advance, max_new_tokens, eos_id, pad_id, temperature, top_p, _generator(seed, device)
    )
    if failed is not None:  # only now: an error the eager loop shares (a bad input) is that error
        _DYNAMIC_ONLY.add(model)
        warnings.warn(
            f"workbench: sampling from {type(model).__name__} runs without a static KV cache and "
            f"CUDA graphs from now on ({type(failed).__name__}: {str(failed)[:200]}); the same "
            "tokens, only slower.",
            RuntimeWarning,
            stacklevel=3,
        )
    return completions


def _fast(model) -> bool:
    """Whether ``model`` runs :mod:`~workbench.llm.llama_fast`'s forward: a plain Llama on
    the CPU (on a GPU the forwards are CUDA graphs over transformers' own)."""
    return llama_fast.supports(model) and model_device(model).type == "cpu"


def _forwards(model, fast: bool | None = None):
    """``(forward, select)`` for the eager paths: ``forward(ids, positions, mask, past)`` →
    ``(logits, past)`` continues ``past`` (None: nothing yet; ``mask`` covers past and
    ``ids``), and ``select(past, rows)`` gives row ``i`` row ``rows[i]``'s keys and values.
    :mod:`~workbench.llm.llama_fast`'s where it computes the model (``fast``, by default
    :func:`_fast`: the same logits, a decode step of the notebook's 128 rows in 1.9 ms
    against 2.7), else transformers' forward over its KV cache."""
    if _fast(model) if fast is None else fast:
        return (
            lambda ids, pos, mask, past: llama_fast.forward(model, ids, pos, mask.bool(), past),
            llama_fast.select_rows,
        )

    def forward(ids, pos, mask, past):
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=past, use_cache=True)
        return out.logits, out.cache

    def select(cache, rows):
        cache.batch_select_indices(rows)
        return cache

    return forward, select


def _prefill(model, prompt_ids, mask):
    """The logits after each prompt and ``advance(token)``, which feeds the sampled tokens
    back through the model's forward over the growing keys and values for the next logits."""
    forward, select = _forwards(model)
    pos = positions(mask)
    shared = distinct_prompts(prompt_ids, mask)
    if shared is None:
        logits, past = forward(prompt_ids, pos, mask, None)
        first = logits[:, -1]
    else:  # a group's prompt once: its keys and values copied to each row that repeats it
        ids, distinct_mask, inverse = shared
        logits, past = forward(ids, positions(distinct_mask), distinct_mask, None)
        first, past = logits[:, -1][inverse], select(past, inverse)
    next_pos = pos[:, -1] + 1

    def advance(token):  # one forward of width 1 over the growing keys and values
        nonlocal mask, past, next_pos
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], 1)
        logits, past = forward(token[:, None], next_pos[:, None], mask, past)
        next_pos = next_pos + 1
        return logits[:, -1]

    return first, advance


def _generator(seed: int | None, device) -> torch.Generator | None:
    return None if seed is None else torch.Generator(device=device).manual_seed(seed)


def _sampling_loop(
    logits, advance, max_new_tokens: int, eos_id: int, pad_id: int, temperature: float, top_p: float, generator
) -> Completions:
    """Pick a token per row from ``logits``, then ``advance(token)`` for the next logits,
    up to ``max_new_tokens`` times or until every row has said ``<eos>`` (rows done pad)."""
    batch, device = logits.shape[0], logits.device
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device)
    live = torch.zeros((batch, max_new_tokens), dtype=torch.bool, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        token, logp = _pick(logits, temperature, top_p, generator)
        token = token.masked_fill(finished, pad_id)
        tokens[:, t], live[:, t] = token, ~finished
        logps[:, t] = logp.masked_fill(finished, 0.0)
        finished = finished | (token == eos_id)
        if t == max_new_tokens - 1 or bool(finished.all()):
            break
        logits = advance(token)
    return Completions(tokens, live.to(torch.float32), logps)


def _static_cache(model, batch: int, length: int):
    """``model``'s StaticCache for ``batch`` rows of ``length`` positions, made once and
    reused (a graph replays over the same buffers)."""
    from transformers import StaticCache

    caches = _CACHES.setdefault(model, {})
    if (batch, length) not in caches:
        caches[batch, length] = StaticCache(config=model.config, max_cache_len=length)
    return caches[batch, length]


@torch.no_grad()
def sample_static(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    graphs: bool = False,
) -> Completions:
    """:func:`sample` with shapes that never change, so that each forward can be a CUDA
    graph (``graphs``, on a GPU): the KV cache has ``P + max_new_tokens`` slots, refilled by
    the prefill, and the attention mask spans all of them from the start (the completion's
    slots marked real: causality hides the ones not written yet). A plain Llama runs
    :mod:`~workbench.llm.llama_fast` over a ``StaticKV``, each distinct prompt prefilled
    once (:func:`_fast_static`); another model transformers' forward over a StaticCache. Only the
    forwards are graphed; picking tokens runs eagerly on the same generator as
    :func:`sample`, so both draw the same tokens up to the logits' rounding. On the CPU
    (``graphs`` off) it is the GPU path's twin, which the tests compare with :func:`sample`.

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> tok = char_tokenizer()
    >>> model = tiny_causal_lm(tok, context=32, seed=0)
    >>> batch = tok(["1+2=", "10+20="], padding=True, return_tensors="pt")
    >>> kw = dict(max_new_tokens=4, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, seed=0)
    >>> a = sample(model, batch["input_ids"], batch["attention_mask"], **kw)
    >>> b = sample_static(model, batch["input_ids"], batch["attention_mask"], **kw)
    >>> bool((a.tokens == b.tokens).all())
    True
    """
    device = model_device(model)
    batch, width = prompt_ids.shape
    given = prompt_ids, prompt_mask  # where the caller has them (the distinct rows are found there)
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device).long()
    mask = torch.cat([prompt_mask, prompt_mask.new_ones((batch, max_new_tokens))], 1)
    pos = positions(prompt_mask)
    shape = f"[{batch}x{width}+{max_new_tokens}]"  # a slot per shape: training and held-out batches alternate
    if llama_fast.supports(model):
        prefill, prefill_inputs, decode = _fast_static(model, *given, max_new_tokens)
        shape += f"/{prefill_inputs[0].shape[0]}"  # the distinct prompts' count (padded): the prefill's shape
    else:
        cache = _static_cache(model, batch, width + max_new_tokens)
        graphs = graphs and graph_safe(cache)
        prefill_inputs = (prompt_ids, mask, pos)

        def prefill(ids, mask, pos):
            cache.reset()  # inside the graph too: every generation starts from an empty cache
            return (
                model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
                .logits[:, -1]
                .float(),
            )

        def decode(token, mask, pos):
            return (
                model(
                    input_ids=token[:, None],
                    attention_mask=mask,
                    position_ids=pos[:, None],
                    cache=cache,
                    use_cache=True,
                )
                .logits[:, -1]
                .float(),
            )

    def forward(name, fn, *inputs):
        out = graphed_call(model, name + shape, fn, inputs) if graphs else None
        return (out if out is not None else fn(*inputs))[0]

    next_pos = pos[:, -1] + 1

    def advance(token):
        nonlocal next_pos
        logits = forward("decode", decode, token, mask, next_pos)
        next_pos = next_pos + 1
        return logits

    return _sampling_loop(
        forward("prefill", prefill, *prefill_inputs),
        advance,
        max_new_tokens,
        eos_id,
        pad_id,
        temperature,
        top_p,
        _generator(seed, device),
    )


def _fast_static(model, prompt_ids, prompt_mask, max_new_tokens: int):
    """:func:`sample_static`'s forwards for a model :mod:`~workbench.llm.llama_fast`
    computes: ``(prefill, its inputs, decode)``. The prefill runs each distinct prompt once
    (:func:`graphable_prompts`, padded, so that a graph keeps its shape) and copies its keys
    and values to the rows that repeat it, in a :class:`~workbench.llm.llama_fast.StaticKV`
    of the batch's rows over prompt + completion slots; a decode step writes the next slot."""
    batch, width = prompt_ids.shape
    caches = _CACHES.setdefault(model, {})
    key = (batch, width + max_new_tokens)
    if not isinstance(caches.get(key), llama_fast.StaticKV):
        caches[key] = llama_fast.StaticKV(model, batch, width + max_new_tokens)
    kv = caches[key]
    shared = graphable_prompts(model, prompt_ids, prompt_mask)
    if shared is None:  # every row its own prompt
        device = model_device(model)
        shared = (prompt_ids.to(device), prompt_mask.to(device).long(), torch.arange(batch, device=device))

    def prefill(ids, ids_mask, rows):
        logits, prefix = llama_fast.forward(model, ids, positions(ids_mask), ids_mask.bool())
        kv.fill(prefix, rows)
        return (logits[:, -1].index_select(0, rows).float(),)

    def decode(token, mask, pos):
        return (llama_fast.decode_step(model, token[:, None], pos[:, None], mask, kv)[:, -1].float(),)

    return prefill, shared, decode


def graph_safe(cache) -> bool:
    """Whether a CUDA graph may replay forwards over ``cache``: every layer a plain
    ``StaticLayer``, whose write position lives on the device. A sliding-window layer
    (Mistral with ``sliding_window``, Gemma 2/3, Qwen2 with a window) counts tokens in a
    Python int that the attention mask reads: a graph would bake in the step it was captured
    at and replay that mask every step after. Such a model samples eagerly, the same tokens.

    >>> from transformers import LlamaConfig, StaticCache
    >>> graph_safe(StaticCache(config=LlamaConfig(hidden_size=8, intermediate_size=8, num_hidden_layers=1,
    ...                                           num_attention_heads=2), max_cache_len=4))
    True
    """
    if isinstance(cache, llama_fast.StaticKV):  # its write position a device scalar, its mask full width
        return True
    from transformers.cache_utils import StaticLayer

    layers = getattr(cache, "layers", None)
    return layers is not None and all(type(layer) is StaticLayer for layer in layers)


def sequence_logp(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    tokens: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    cuda_graphs: bool = True,
    shared: tuple | None = None,
) -> torch.Tensor:
    """Each completion token's log-probability under ``model`` at ``temperature``: ``[B, C]``,
    with gradients unless the caller turns them off. A batch whose prompts repeat (GRPO's
    groups) runs each distinct prompt once (:func:`distinct_prompts`, or ``shared`` when
    the caller found them: :func:`graphable_prompts`, which a graph being captured needs);
    else one full forward over prompt + completion. The same numbers, up to rounding, as
    :func:`sample` recorded with a KV cache. The inputs go to the model's device. Without
    gradients on a GPU (the reference's scoring) the forward replays a CUDA graph
    (``cuda_graphs``)."""
    device = model_device(model)
    inputs = tuple(x.to(device) for x in (prompt_ids, prompt_mask, tokens, completion_mask))
    score = scorer(model, temperature)
    if shared is not None:
        return _shared_prompt_logp(model, temperature, shared, *inputs)
    if cuda_graphs and device.type == "cuda" and not torch.is_grad_enabled():
        shape = "x".join(map(str, (*prompt_ids.shape, tokens.shape[1])))
        found = graphable_prompts(model, prompt_ids, prompt_mask)  # as given: on the host, no wait
        if found is not None:  # each distinct prompt's forward once, in the graph too

            def shared_score(ids, mask, inverse, *rest):
                return (_shared_prompt_logp(model, temperature, (ids, mask, inverse), *rest),)

            shape += f"/{found[0].shape[0]}"
            out = graphed_call(model, f"shared_logp[{shape}]@{temperature}", shared_score, (*found, *inputs))
            if out is None:  # warming up, or capturing failed: the same function eagerly
                out = shared_score(*found, *inputs)
            return out[0]
        out = graphed_call(model, f"sequence_logp[{shape}]@{temperature}", score, inputs)
        if out is not None:
            return out[0]
    # on a GPU the update's forward is captured as a graph after eager warm-up calls, which
    # must run the ops the graph records: the full forward there unless the caller passed
    # ``shared`` (found before the capture), the shared one elsewhere
    shared = None if device.type == "cuda" or _capturing() else distinct_prompts(*inputs[:2])
    if shared is not None:  # GRPO's groups: each prompt's forward once, not group_size times
        return _shared_prompt_logp(model, temperature, shared, *inputs)
    if _fast(model):
        ids, mask, tokens, completion = inputs
        attention = torch.cat([mask.long(), completion.long()], 1)
        logits, _ = llama_fast.forward(model, torch.cat([ids, tokens], 1), positions(attention), attention.bool())
        return _token_logp(logits[:, ids.shape[1] - 1 : -1], tokens, temperature)
    return score(*inputs)[0]


def _capturing() -> bool:
    """A CUDA graph is being captured (False on a build without CUDA, whose check raises)."""
    try:
        return torch.cuda.is_current_stream_capturing()
    except RuntimeError:
        return False


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor):
    """``(ids, mask, inverse)`` of the distinct rows of a prompt batch (row ``r`` is
    distinct row ``inverse[r]``), or None when no row repeats. It reads the batch on the
    host: never inside a CUDA graph.

    >>> ids = torch.tensor([[1, 2], [1, 2], [3, 4]])
    >>> distinct_prompts(ids, torch.ones_like(ids))[2].tolist(), distinct_prompts(ids[1:], torch.ones(2, 2))
    ([0, 0, 1], None)
    """
    every = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], 1)
    rows, inverse = _distinct_rows(every)
    if rows.shape[0] == prompt_ids.shape[0]:
        return None
    width = prompt_ids.shape[1]
    return rows[:, :width], rows[:, width:], inverse


def graphable_prompts(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor):
    """:func:`distinct_prompts` for a forward a CUDA graph replays: the distinct rows padded
    (with copies of the first) to a power of two, so that a batch in which two groups drew
    the same prompt keeps the graph's shapes; None where the full forward runs instead (no
    prompt repeats, or a model :mod:`~workbench.llm.llama_fast` does not compute, whose
    own forward's cache bookkeeping a graph may not record). It reads the batch on the host:
    call it before a capture, and pass what it returns as ``sequence_logp``'s ``shared``.
    Give it the batch where it is still on the host (the tokenizer's): on a GPU, finding
    the rows there would wait for everything queued on the device first. What it returns
    is on the model's device.

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> from workbench.llm.models import tiny_causal_lm
    >>> model = tiny_causal_lm(char_tokenizer(), context=16)
    >>> ids = torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4], [5, 6], [5, 6]])
    >>> rows, mask, inverse = graphable_prompts(model, ids, torch.ones_like(ids))
    >>> rows.shape[0], bool((rows[inverse] == ids).all())   # 3 distinct prompts, padded to 4
    (4, True)
    """
    if not llama_fast.supports(model):
        return None
    found = distinct_prompts(prompt_ids, prompt_mask)
    if found is None:
        return None
    ids, mask, inverse = found
    rows = 1 << (ids.shape[0] - 1).bit_length()
    if rows >= prompt_ids.shape[0]:  # padding would make it no cheaper than every row
        return None
    extra = rows - ids.shape[0]
    if extra:
        ids, mask = torch.cat([ids, ids[:1].expand(extra, -1)]), torch.cat([mask, mask[:1].expand(extra, -1)])
    device = model_device(model)
    return ids.to(device), mask.to(device), inverse.to(device)


def _distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.unique(rows, dim=0, return_inverse=True)``'s rows (in another order) and
    inverse, six times sooner on GRPO's batches: each row is hashed to one integer (equal
    rows, equal keys), the keys are made unique, and the result is checked row for row;
    a collision (two rows, one key) falls back to ``torch.unique``."""
    count, width = rows.shape
    mix = (torch.arange(1, width + 1, dtype=torch.int64, device=rows.device) * 0x5851F42D4C957F2D) | 1
    keys, inverse = torch.unique(((rows.long() + 1) * mix).sum(1), return_inverse=True)  # int64 wraps around
    first = torch.full((keys.shape[0],), count, device=rows.device).scatter_reduce_(
        0, inverse, torch.arange(count, device=rows.device), "amin"
    )  # each key's first row
    distinct = rows[first]
    if torch.equal(distinct[inverse], rows):
        return distinct, inverse
    return torch.unique(rows, dim=0, return_inverse=True)


def _shared_prompt_logp(model, temperature, shared, prompt_ids, prompt_mask, tokens, completion_mask):
    """:func:`scorer`'s numbers with each distinct prompt run once: a forward over the
    distinct prompts fills a KV cache (gradients flow through it), copied to every row
    that repeats the prompt, then one forward over the completions. The logits at the
    prompt's last position predict the first completion token. A plain Llama runs
    :mod:`~workbench.llm.llama_fast`'s forward on any device (a GPU's graphs record it)."""
    forward, select = _forwards(model, llama_fast.supports(model))
    ids, mask, inverse = shared
    logits, past = forward(ids, positions(mask), mask, None)
    logits = logits[:, -1:][inverse]
    if tokens.shape[1] > 1:
        attention = torch.cat([prompt_mask.long(), completion_mask.long()], 1)[:, :-1]
        rest, _ = forward(
            tokens[:, :-1], positions(attention)[:, prompt_ids.shape[1] :], attention, select(past, inverse)
        )  # each row's copy of its prompt's keys and values
        logits = torch.cat([logits, rest], 1)
    return _token_logp(logits, tokens, temperature)


def scorer(model, temperature: float = 1.0):
    """The function :func:`sequence_logp` runs (and graphs): ``(prompt_ids, prompt_mask,
    tokens, completion_mask)`` on the model's device → a 1-tuple of ``[B, C]``
    log-probabilities. Shapes in, shapes out: nothing in it reads a value on the host."""

    def score(prompt_ids, prompt_mask, tokens, completion_mask):
        width = prompt_ids.shape[1]
        attention = torch.cat([prompt_mask.long(), completion_mask.long()], 1)
        # use_cache off: a full forward keeps no KV cache (the model's config would build one)
        logits = model(
            input_ids=torch.cat([prompt_ids, tokens], 1),
            attention_mask=attention,
            position_ids=positions(attention),
            use_cache=False,
        ).logits
        # the logits at position i predict token i + 1: the completion's come from P-1 … P+C-2
        return (_token_logp(logits[:, width - 1 : -1], tokens, temperature),)

    return score


def _token_logp(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Each token's log-probability under ``logits`` ``[B, C, V]`` at ``temperature``."""
    logits = logits.float()
    if temperature not in (0, 1):
        logits = logits / temperature
    return torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
