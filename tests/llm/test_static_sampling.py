"""The GPU's sampling path on the CPU (its twin, no graphs): a static KV cache spanning prompt
and completion, one attention mask for the whole generation, the cache reset by the prefill.
It must draw what the eager loop with a growing cache draws, call after call, for every
batch shape, every left padding, greedy or nucleus; the graphs on top are tested on a GPU
(tests/gpu/test_grpo_graphs.py)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from workbench.llm.generation import _CACHES, sample, sample_static, sequence_logp  # noqa: E402
from workbench.llm.models import tiny_causal_lm  # noqa: E402
from workbench.llm.tasks import encode_prompts  # noqa: E402
from workbench.llm.tokenizers import char_tokenizer  # noqa: E402

TOK = char_tokenizer()


def _both(model, prompts, seed, width=7, max_new_tokens=5, **kw):
    ids, mask = encode_prompts(TOK, prompts, width)
    args = dict(max_new_tokens=max_new_tokens, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=seed, **kw)
    return sample(model, ids, mask, **args), sample_static(model, ids, mask, **args), (ids, mask)


@pytest.mark.parametrize(
    "kw", [{}, {"temperature": 0}, {"temperature": 0.7, "top_p": 0.8}], ids=["sampled", "greedy", "nucleus"]
)
def test_the_static_path_draws_the_eager_loops_tokens_and_log_probs(kw):
    model = tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=3)
    # prompts of 3 to 7 tokens: rows with no padding and rows mostly padding in one batch
    prompts = ["1+2=", "13+14=", "0+0=", "19+19=", "7=", "99+99="]
    for seed in range(6):
        eager, static, _ = _both(model, prompts, seed, **kw)
        assert torch.equal(eager.tokens, static.tokens)
        assert torch.equal(eager.completion_mask, static.completion_mask)
        torch.testing.assert_close(eager.logp, static.logp, rtol=1e-5, atol=1e-6)


def test_each_call_starts_from_an_empty_cache_whatever_came_before():
    """The cache is made once per shape and reused: what a longer or different batch wrote
    into it must not reach the next call (the prefill resets it)."""
    model = tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=4)
    first = ["1+2=", "3+4=", "5+6=", "7+8="]
    _, before, _ = _both(model, first, seed=0)
    for other in (["19+19=", "18+17=", "0+1=", "2+2="], ["1+1=", "2+2="]):
        _both(model, other, seed=5)
    _, after, _ = _both(model, first, seed=0)
    assert torch.equal(before.tokens, after.tokens) and torch.equal(before.logp, after.logp)
    assert set(_CACHES[model]) == {(4, 12), (2, 12)}  # one cache a shape, kept


def test_the_recorded_log_probs_are_a_full_forwards():
    """What GRPO's ratio needs: the sampling log-probabilities equal the learner's full
    forward over prompt + completion, on the completion's real tokens."""
    model = tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=5)
    _, static, (ids, mask) = _both(model, ["1+2=", "13+14=", "0+0="], seed=1)
    with torch.no_grad():
        full = sequence_logp(model, ids, mask, static.tokens, static.completion_mask)
    live = static.completion_mask.bool()
    torch.testing.assert_close(full[live], static.logp[live], rtol=1e-5, atol=1e-5)


def test_rows_stop_at_eos_and_the_batch_stops_when_all_have():
    model = tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=6)
    with torch.no_grad():  # make <eos> every row's most likely next token
        model.lm_head.weight[TOK.eos_token_id] += 50 * model.model.norm.weight.sign()
    _, static, _ = _both(model, ["1+2=", "13+14="], seed=0, temperature=0)
    assert static.tokens[:, 0].tolist() == [TOK.eos_token_id] * 2
    assert static.completion_mask.tolist() == [[1, 0, 0, 0, 0]] * 2
    assert (static.tokens[:, 1:] == TOK.pad_token_id).all()


def _from_config(kind: str):
    import transformers as T

    common = dict(
        vocab_size=len(TOK),
        pad_token_id=TOK.pad_token_id,
        eos_token_id=TOK.eos_token_id,
        bos_token_id=None,
        max_position_embeddings=32,
    )
    decoder = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **common,
    )
    configs = {
        "llama-sdpa": lambda: T.LlamaConfig(attn_implementation="sdpa", **decoder),
        "qwen2": lambda: T.Qwen2Config(**decoder),
        "mistral": lambda: T.MistralConfig(sliding_window=None, **decoder),
        "gemma": lambda: T.GemmaConfig(head_dim=8, **decoder),
        "gpt2": lambda: T.GPT2Config(
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=32,
            **{k: v for k, v in common.items() if k != "max_position_embeddings"},
        ),
    }
    torch.manual_seed(0)
    return T.AutoModelForCausalLM.from_config(configs[kind]()).eval()


@pytest.mark.parametrize("kind", ["llama-sdpa", "qwen2", "mistral", "gemma", "gpt2"])
def test_other_architectures_built_from_a_config_sample_the_same_over_a_static_cache(kind):
    """Models this repository does not build (grouped-query attention, sdpa, absolute
    positions): the GPU path must serve any causal LM a user passes, not only the tiny Llama."""
    model = _from_config(kind)
    for seed in range(3):
        eager, static, _ = _both(model, ["1+2=", "13+14=", "0+0=", "9="], seed)
        assert torch.equal(eager.tokens, static.tokens)
        torch.testing.assert_close(eager.logp, static.logp, rtol=1e-5, atol=1e-5)


def test_a_lora_wrapped_model_samples_the_same_over_a_static_cache():
    pytest.importorskip("peft")
    from workbench.llm import with_lora

    model = with_lora(tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=8), rank=4)
    eager, static, _ = _both(model, ["1+2=", "13+14="], seed=2)
    assert torch.equal(eager.tokens, static.tokens)
    torch.testing.assert_close(eager.logp, static.logp, rtol=1e-5, atol=1e-5)


def test_a_sliding_window_model_samples_over_a_static_cache_but_never_through_a_graph():
    """A sliding-window layer counts its tokens in a Python int that the mask reads: a CUDA
    graph would replay the mask of the step it captured. Such a model samples the same
    eagerly over its static cache and asks for no graph (on a CPU the first calls of a
    graphed function only count, which shows whether a graph was asked for)."""
    import transformers as T

    from workbench.kernels.cuda_graphs import _CALLS
    from workbench.llm.generation import graph_safe

    common = dict(
        vocab_size=len(TOK),
        pad_token_id=TOK.pad_token_id,
        eos_token_id=TOK.eos_token_id,
        bos_token_id=None,
        max_position_embeddings=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    windowed = T.AutoModelForCausalLM.from_config(T.MistralConfig(sliding_window=4, **common)).eval()
    plain = tiny_causal_lm(TOK, hidden=32, layers=2, context=16, seed=3)
    for seed in range(3):  # a window of 4 over 7 + 5 tokens: the window really cuts
        eager, static, _ = _both(windowed, ["1+2=", "13+14=", "0+0=", "9="], seed)
        assert torch.equal(eager.tokens, static.tokens)
        torch.testing.assert_close(eager.logp, static.logp, rtol=1e-5, atol=1e-5)
    ids, mask = encode_prompts(TOK, ["1+2="], 7)
    for model, safe in ((windowed, False), (plain, True)):  # one call: below the warm-up, nothing captured
        sample_static(
            model, ids, mask, max_new_tokens=2, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, seed=0, graphs=True
        )
        assert graph_safe(_CACHES[model][1, 9]) is safe
        assert sorted(_CALLS.get(model, {})) == ([] if not safe else ["decode[1x7+2]/1", "prefill[1x7+2]/1"])
