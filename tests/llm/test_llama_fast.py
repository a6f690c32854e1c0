"""On the CPU a plain Llama samples and scores through ``workbench.llm.llama_fast``: the
same function as transformers' forward with a fraction of its ops. It must give transformers'
logits (grouped-query attention, scaled rotary embeddings, left padding, a KV cache), their
gradients and the same sampled tokens, be the path actually taken, and step aside for any
model it does not compute (other architectures, biases, LoRA, hooks it would skip, gradient
checkpointing, switched off)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.llm.test_static_sampling import _from_config  # noqa: E402
from workbench.llm import llama_fast  # noqa: E402
from workbench.llm.generation import positions, sample, scorer, sequence_logp  # noqa: E402
from workbench.llm.tasks import encode_prompts  # noqa: E402
from workbench.llm.tokenizers import char_tokenizer  # noqa: E402

TOK = char_tokenizer()
PROMPTS = ["13+14=", "1+2=", "13+14=", "99+99=", "1+2=", "7=", "99+99=", "1+2="]


def llama(**changes):
    """A Llama unlike the notebook's: grouped-query attention, another rope base, and weights
    moved off their initialisation (norm weights of 1 would hide a missing norm)."""
    import transformers as T

    fields = dict(
        vocab_size=len(TOK),
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_theta=500.0,
        pad_token_id=TOK.pad_token_id,
        eos_token_id=TOK.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    fields.update(changes)
    torch.manual_seed(5)
    model = T.LlamaForCausalLM(T.LlamaConfig(**fields)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def transformers_logits(model, ids, mask):
    return model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=False).logits


@pytest.fixture(params=[False, True], ids=["written-out", "fused"])
def attention_form(request, monkeypatch):
    """Both forms on the CPU: written out (the CPU's) and fused (the GPU's: attention,
    norms, rotary embedding)."""
    monkeypatch.setattr(llama_fast, "FUSED", request.param)
    return request.param


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"attn_implementation": "sdpa"},
        {"tie_word_embeddings": True},
        {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    ],
    ids=["gqa", "sdpa", "tied", "scaled-rope"],
)
def test_logits_and_gradients_are_transformers_own(changes, attention_form):
    model = llama(**changes)
    ids, mask = encode_prompts(TOK, PROMPTS, 8)  # left padding on most rows
    real = mask.bool()
    ours, _ = llama_fast.forward(model, ids, positions(mask), real)
    theirs = transformers_logits(model, ids, mask)
    torch.testing.assert_close(ours[real], theirs[real], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(ours).all()  # padding queries (no real key to see) too

    weights = torch.linspace(-1, 1, ours[real].numel()).reshape(ours[real].shape)
    grads = []
    for logits in (
        lambda: llama_fast.forward(model, ids, positions(mask), real)[0],
        lambda: transformers_logits(model, ids, mask),
    ):
        model.zero_grad()
        (logits()[real] * weights).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_kv_cache_continues_the_full_forward(attention_form):
    """Prefill three quarters, then the rest one token at a time over the returned keys and
    values: each step's logits are the full forward's at that position."""
    model = llama()
    ids, mask = encode_prompts(TOK, PROMPTS, 8)
    full = transformers_logits(model, ids, mask)
    pos, real = positions(mask), mask.bool()
    logits, kv = llama_fast.forward(model, ids[:, :5], pos[:, :5], real[:, :5])
    steps = [logits[:, -1]]
    for t in range(5, 8):
        logits, kv = llama_fast.forward(model, ids[:, t : t + 1], pos[:, t : t + 1], real[:, : t + 1], past=kv)
        steps.append(logits[:, -1])
    assert kv[0][0].shape[2] == 8
    real = real[:, 4:]  # a padding position's output is nobody's input: read the real ones
    torch.testing.assert_close(torch.stack(steps, 1)[real], full[:, 4:][real], rtol=1e-5, atol=1e-5)


def test_static_keys_and_values_continue_the_full_forward(attention_form):
    """The GPU sampling loop's form: prefill the first 5 positions of each distinct row
    (rows repeat, as GRPO's groups do), copy them into every row's static slots, then one
    slot a step with the written position a device scalar; slots not yet written (left
    from an earlier, longer use of the same buffers) must weigh nothing."""
    from workbench.llm.generation import distinct_prompts

    model = llama()
    ids, mask = encode_prompts(TOK, PROMPTS, 8)
    full = transformers_logits(model, ids, mask)
    pos, real = positions(mask), mask.bool()
    kv = llama_fast.StaticKV(model, batch=ids.shape[0], length=10)
    for buffer in kv.keys + kv.values:
        buffer.normal_()  # stale numbers in every slot
    distinct, distinct_mask, rows = distinct_prompts(ids[:, :5], mask[:, :5])
    logits, prefix = llama_fast.forward(model, distinct, positions(distinct_mask), distinct_mask.bool())
    kv.fill(prefix, rows)
    assert int(kv.filled) == 5
    key_mask = torch.cat([real, torch.ones(ids.shape[0], 2, dtype=torch.bool)], 1)  # 10 slots
    steps = [logits[:, -1][rows]]
    for t in range(5, 8):
        steps.append(llama_fast.decode_step(model, ids[:, t : t + 1], pos[:, t : t + 1], key_mask, kv)[:, -1])
    assert int(kv.filled) == 8
    real = real[:, 4:]
    torch.testing.assert_close(torch.stack(steps, 1)[real], full[:, 4:][real], rtol=1e-5, atol=1e-5)


def test_sampling_and_scoring_take_the_fast_path_and_match_transformers(monkeypatch):
    model = llama()
    ids, mask = encode_prompts(TOK, PROMPTS, 8)
    kw = dict(max_new_tokens=4, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=3)

    def run():
        out = sample(model, ids, mask, **kw)
        with torch.no_grad():
            return out, sequence_logp(model, ids, mask, out.tokens, out.completion_mask)

    with llama_fast.fast_path(False):
        slow, slow_logp = run()
    calls = []
    original = llama_fast.forward
    monkeypatch.setattr(llama_fast, "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    monkeypatch.setattr(model, "forward", _never)  # transformers' forward must not run
    fast, fast_logp = run()
    assert len(calls) >= 2 + 1  # a prefill, decode steps, the scoring
    assert torch.equal(fast.tokens, slow.tokens)
    torch.testing.assert_close(fast.logp, slow.logp, rtol=1e-5, atol=1e-5)
    live = fast.completion_mask.bool()
    torch.testing.assert_close(fast_logp[live], slow_logp[live], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_logp[live], fast.logp[live], rtol=1e-4, atol=1e-4)  # what was sampled


def _never(*args, **kwargs):
    raise AssertionError("transformers' forward ran where the fast path should have")


def _hooked_llama():
    model = llama()
    model.model.layers[1].self_attn.register_forward_hook(lambda module, args, out: None)
    return model


def _checkpointed_llama():
    model = llama()
    model.gradient_checkpointing_enable()
    return model


@pytest.mark.parametrize("kind", ["qwen2", "mistral", "gemma", "gpt2", "llama-bias", "lora", "hooked", "checkpointed"])
def test_models_it_does_not_compute_run_transformers_forward(kind, monkeypatch):
    if kind == "lora":
        pytest.importorskip("peft")
        from workbench.llm import with_lora

        model = with_lora(llama(), rank=4)
    elif kind in ("hooked", "checkpointed", "llama-bias"):
        model = {
            "hooked": _hooked_llama,
            "checkpointed": _checkpointed_llama,
            "llama-bias": lambda: llama(attention_bias=True),
        }[kind]()
    else:
        model = _from_config(kind)
    assert not llama_fast.supports(model)
    monkeypatch.setattr(llama_fast, "forward", _never)
    ids, mask = encode_prompts(TOK, PROMPTS[:4], 8)
    out = sample(model, ids, mask, max_new_tokens=3, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=0)
    with torch.no_grad():
        logp = sequence_logp(model, ids, mask, out.tokens, out.completion_mask)
        full = scorer(model)(ids, mask, out.tokens, out.completion_mask)[0]
    live = out.completion_mask.bool()
    torch.testing.assert_close(logp[live], full[live], rtol=1e-5, atol=1e-5)


def test_the_switch_turns_it_off():
    model = llama()
    assert llama_fast.supports(model)
    with llama_fast.fast_path(False):
        assert not llama_fast.supports(model)
    assert llama_fast.supports(model)
