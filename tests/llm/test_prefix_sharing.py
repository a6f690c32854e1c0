"""A GRPO batch repeats each prompt ``group_size`` times; sampling and scoring run each
distinct prompt once and copy its KV cache to the rows that repeat it. The numbers must be
the ones a forward over every row gives — log-probabilities, their gradients, the sampled
tokens — for any causal LM, any left padding, with rows in any order."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.llm.test_static_sampling import _from_config  # noqa: E402
from workbench.llm.generation import (
    distinct_prompts,
    graphable_prompts,
    sample,
    sample_static,
    scorer,  # noqa: E402
    sequence_logp,
)
from workbench.llm.models import tiny_causal_lm  # noqa: E402
from workbench.llm.tasks import encode_prompts  # noqa: E402
from workbench.llm.tokenizers import char_tokenizer  # noqa: E402

TOK = char_tokenizer()
#: groups of repeated prompts, shuffled together, of 3 to 7 tokens (rows mostly padding and none)
PROMPTS = ["13+14=", "1+2=", "13+14=", "99+99=", "1+2=", "7=", "99+99=", "1+2=", "7=", "13+14="]
KINDS = ["tiny-llama", "llama-sdpa", "qwen2", "mistral", "gemma", "gpt2"]


def model_of(kind: str):
    return tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=3) if kind == "tiny-llama" else _from_config(kind)


def batch(width: int = 7):
    return encode_prompts(TOK, PROMPTS, width)


def test_distinct_prompts_maps_every_row_to_its_prompt():
    ids, mask = batch()
    rows, row_mask, inverse = distinct_prompts(ids, mask)
    assert rows.shape[0] == len(set(PROMPTS)) == 4
    assert torch.equal(rows[inverse], ids) and torch.equal(row_mask[inverse].long(), mask.long())
    assert distinct_prompts(*encode_prompts(TOK, sorted(set(PROMPTS)), 7)) is None  # nothing repeats


def test_the_same_tokens_with_another_padding_are_another_prompt():
    ids, mask = batch()
    moved = mask.clone()
    moved[0, 0] = 1  # the first row's first pad now attended: not the prompt the others repeat
    assert distinct_prompts(ids, moved)[0].shape[0] == 5


@pytest.mark.parametrize("kind", KINDS)
def test_shared_scoring_gives_a_full_forwards_log_probs_and_gradients(kind):
    model = model_of(kind)
    ids, mask = batch()
    out = sample(model, ids, mask, max_new_tokens=4, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=0)
    weights = torch.linspace(-1, 1, out.tokens.numel()).reshape(out.tokens.shape) * out.completion_mask

    def scored(fn):
        model.zero_grad()
        logp = fn(model, ids, mask, out.tokens, out.completion_mask)
        (logp * weights).sum().backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    shared, shared_grads = scored(sequence_logp)
    full, full_grads = scored(lambda m, *x: scorer(m)(*x)[0])
    live = out.completion_mask.bool()
    torch.testing.assert_close(shared[live], full[live], rtol=1e-5, atol=1e-5)
    assert len(shared_grads) == len(full_grads) > 0
    for a, b in zip(shared_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_with_a_shared_prefill_draws_an_unshared_prefills_tokens(kind):
    """sample_static prefills every row (its shapes never change); sample prefills each
    distinct prompt once. Same generator, same tokens."""
    model = model_of(kind)
    ids, mask = batch()
    for seed in range(3):
        kw = dict(max_new_tokens=4, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=seed)
        shared, every_row = sample(model, ids, mask, **kw), sample_static(model, ids, mask, **kw)
        assert torch.equal(shared.tokens, every_row.tokens)
        torch.testing.assert_close(shared.logp, every_row.logp, rtol=1e-5, atol=1e-5)


def test_a_one_token_completion_is_scored_from_the_prompts_forward_alone():
    model = model_of("tiny-llama")
    ids, mask = batch()
    tokens = torch.full((len(PROMPTS), 1), TOK.eos_token_id)
    ones = torch.ones_like(tokens, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(
            sequence_logp(model, ids, mask, tokens, ones), scorer(model)(ids, mask, tokens, ones)[0]
        )


def test_lora_adapters_get_the_full_forwards_gradients_through_the_shared_cache():
    pytest.importorskip("peft")
    from workbench.llm import with_lora

    model = with_lora(tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=8), rank=4)
    for p in model.parameters():  # LoRA's B starts at zero: move it so that A's gradient is not 0
        if p.requires_grad:
            p.data.normal_(0, 0.1)
    ids, mask = batch()
    out = sample(model, ids, mask, max_new_tokens=3, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=1)
    grads = []
    for fn in (sequence_logp, lambda m, *x: scorer(m)(*x)[0]):
        model.zero_grad()
        (fn(model, ids, mask, out.tokens, out.completion_mask) * out.completion_mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
    for a, b in zip(*grads):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_rows_whose_hashes_collide_stay_apart(monkeypatch):
    """distinct_prompts hashes rows to find repeats; two different rows with one hash must
    not be taken for one prompt (the check after the hash falls back to torch.unique)."""
    from workbench.llm import generation

    ids, mask = batch()
    real_unique = torch.unique
    # every row to key 0: all rows "collide", and the answer must still be the true one
    monkeypatch.setattr(
        generation.torch,
        "unique",
        lambda x, **kw: real_unique(torch.zeros_like(x), **kw) if x.dim() == 1 else real_unique(x, **kw),
    )
    rows, row_mask, inverse = distinct_prompts(ids, mask)
    assert rows.shape[0] == 4
    assert torch.equal(rows[inverse], ids) and torch.equal(row_mask[inverse].long(), mask.long())


@pytest.mark.parametrize("prompts", [PROMPTS, PROMPTS[:9], ["1+2="] * 3 + ["13+14="] * 3 + ["7="] * 3])
def test_padded_distinct_prompts_given_before_a_capture_score_as_the_full_forward(prompts):
    """The GPU update's graph gets the distinct prompts found before its capture, padded to
    a power of two (4 distinct of 10 rows: none added; 3 of 9: one): the log-probs and
    gradients it computes from them are the full forward's, and the padding rows, which
    no row reads, get no gradient's worth of difference."""
    model = model_of("tiny-llama")
    ids, mask = encode_prompts(TOK, prompts, 7)
    shared = graphable_prompts(model, ids, mask)
    distinct = len(set(prompts))
    assert shared[0].shape[0] == 1 << (distinct - 1).bit_length() >= distinct
    assert torch.equal(shared[0][shared[2]], ids) and torch.equal(shared[1][shared[2]].long(), mask.long())
    out = sample(model, ids, mask, max_new_tokens=4, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=2)
    weights = torch.linspace(-1, 1, out.tokens.numel()).reshape(out.tokens.shape) * out.completion_mask
    results = []
    for given in (shared, None):
        model.zero_grad()
        logp = (
            sequence_logp(model, ids, mask, out.tokens, out.completion_mask, shared=given)
            if given
            else scorer(model)(ids, mask, out.tokens, out.completion_mask)[0]
        )
        (logp * weights).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    (shared_logp, shared_grads), (full_logp, full_grads) = results
    live = out.completion_mask.bool()
    torch.testing.assert_close(shared_logp[live], full_logp[live], rtol=1e-5, atol=1e-5)
    for a, b in zip(shared_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "qwen2"])
def test_no_graphable_prompts_for_a_model_the_fast_forward_does_not_compute(kind):
    """A graph records the fast Llama forward only; another model's shared path goes through
    transformers' cache bookkeeping, so its graphs keep the full forward."""
    ids, mask = batch()
    assert graphable_prompts(model_of(kind), ids, mask) is None


def test_no_graphable_prompts_where_padding_saves_nothing():
    model = model_of("tiny-llama")
    assert graphable_prompts(model, *encode_prompts(TOK, sorted(set(PROMPTS)), 7)) is None  # nothing repeats
    # 5 distinct of 6 rows: padded to 8 rows, more than the batch's own 6
    assert graphable_prompts(model, *encode_prompts(TOK, ["1+2=", "1+2=", "3=", "4=", "5=", "6="], 7)) is None


@pytest.mark.parametrize("prompts", [PROMPTS, ["1+2="] * 4 + ["13+14="] * 4 + ["1+2="] * 4])
def test_the_static_path_with_a_shared_prefill_records_a_full_forwards_log_probs(prompts):
    """The GPU's sampling path for a plain Llama: each distinct prompt prefilled once (3 of
    12 rows padded to 4; two groups of one prompt), its keys and values copied into every
    row's static slots, then one slot a step. What it records must be what transformers'
    own full forward over prompt + completion gives, not what another shortcut gives."""
    model = model_of("tiny-llama")
    ids, mask = encode_prompts(TOK, prompts, 7)
    for seed in range(3):
        out = sample_static(
            model, ids, mask, max_new_tokens=4, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=seed
        )
        with torch.no_grad():
            full = scorer(model)(ids, mask, out.tokens, out.completion_mask)[0]
        live = out.completion_mask.bool()
        assert live[:, 0].all() and not live.all()  # rows that stopped early among them
        torch.testing.assert_close(out.logp[live], full[live], rtol=1e-5, atol=1e-5)
