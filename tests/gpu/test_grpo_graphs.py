"""GRPO's CUDA graphs on a real GPU (skipped without CUDA): sampling replays its prefill and
decode forwards over a static KV cache and draws the eager loop's tokens; weights loaded
into the model reach the replay; the reference's scoring and the update replay what the
eager calls compute, each distinct prompt's forward once where prompts repeat (GRPO's
groups); training and held-out batch shapes keep a graph each. Their CPU twins:
tests/llm/test_static_sampling.py (the static path against the eager loop, no graphs) and
tests/llm/test_prefix_sharing.py (the padded distinct prompts against the full forward)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.gpu import ON_TORCH_GPU

pytestmark = ON_TORCH_GPU
pytest.importorskip("transformers")


def _model_and_prompts(rows=32, seed=0, layers=2, group=1, prompts=None):
    """A model on the GPU and ``rows`` prompts, each repeated ``group`` times in a row."""
    import torch

    from workbench.algorithms import grpo
    from workbench.llm.tasks import encode_prompts

    cfg = dataclasses.replace(grpo.GRPOConfig(), seed=seed, layers=layers)
    model = grpo.make_model(cfg, grpo.tokenizer).to("cuda:0").eval()
    texts = [p for p in (prompts or grpo.task.train[:rows]) for _ in range(group)]
    ids, mask = encode_prompts(grpo.tokenizer, texts, grpo.task.prompt_width)
    torch.manual_seed(seed)
    return model, ids, mask


def _sample(model, ids, mask, seed, **kw):
    from workbench.algorithms import grpo
    from workbench.llm.generation import sample

    return sample(
        model,
        ids,
        mask,
        max_new_tokens=4,
        eos_id=grpo.tokenizer.eos_token_id,
        pad_id=grpo.tokenizer.pad_token_id,
        seed=seed,
        **kw,
    )


def _slots(model):
    from workbench.kernels.cuda_graphs import _CALLS

    return _CALLS.get(model, {})


def test_replayed_sampling_draws_the_eager_loops_tokens():
    import torch

    model, ids, mask = _model_and_prompts()
    for seed in range(5):  # two eager calls a forward, then captured, then replayed
        graphed = _sample(model, ids, mask, seed)
        eager = _sample(model, ids, mask, seed, cuda_graphs=False)
        assert torch.equal(graphed.tokens, eager.tokens)
        assert torch.equal(graphed.completion_mask, eager.completion_mask)
        torch.testing.assert_close(graphed.logp, eager.logp, rtol=1e-4, atol=1e-5)
    slots = _slots(model)
    assert {name.split("[")[0] for name in slots} == {"prefill", "decode"}
    assert all(s.graph is not None and not s.failed for s in slots.values())


def test_replayed_sampling_of_repeated_prompts_prefills_each_once_and_draws_the_eager_tokens():
    """GRPO's groups: a plain Llama samples through llama_fast's static keys and values,
    each distinct prompt prefilled once (4 of 32 rows) and copied; the replays draw what the
    eager loop over transformers' forward draws."""
    import torch

    from workbench.llm import llama_fast
    from workbench.llm.generation import _CACHES

    model, ids, mask = _model_and_prompts(rows=4, group=8)
    for seed in range(5):
        graphed = _sample(model, ids, mask, seed)
        eager = _sample(model, ids, mask, seed, cuda_graphs=False)
        assert torch.equal(graphed.tokens, eager.tokens)
        torch.testing.assert_close(graphed.logp, eager.logp, rtol=1e-4, atol=1e-5)
    assert all(isinstance(cache, llama_fast.StaticKV) for cache in _CACHES[model].values())
    slots = _slots(model)
    assert sorted(name.split("[")[0] for name in slots) == ["decode", "prefill"]
    assert all(name.endswith("/4") for name in slots)  # the prefill's 4 distinct prompts
    assert all(s.graph is not None and not s.failed for s in slots.values())


def test_weights_loaded_into_the_model_reach_the_replay():
    import torch

    from workbench.llm import load_weights, weights_copy

    model, ids, mask = _model_and_prompts()
    for seed in range(4):
        _sample(model, ids, mask, seed)
    other, _, _ = _model_and_prompts(seed=7)
    addresses = [p.data_ptr() for p in model.parameters()]
    load_weights(model, weights_copy(other))  # as the generate replica's sync does: a copy, loaded in place
    assert [p.data_ptr() for p in model.parameters()] == addresses
    graphed = _sample(model, ids, mask, 0)
    assert all(s.graph is not None for s in _slots(model).values())
    assert torch.equal(graphed.tokens, _sample(other, ids, mask, 0, cuda_graphs=False).tokens)


def test_training_and_heldout_shapes_keep_a_graph_each():
    model, ids, mask = _model_and_prompts(rows=32)
    _, held_ids, held_mask = _model_and_prompts(rows=16)
    for seed in range(4):
        _sample(model, ids, mask, seed)
        _sample(model, held_ids, held_mask, seed)
    graphs = {name: slot.graph for name, slot in _slots(model).items()}
    assert len(graphs) == 4 and all(graphs.values())
    _sample(model, ids, mask, 9)
    assert {name: slot.graph for name, slot in _slots(model).items()} == graphs  # none captured again


def test_replayed_reference_scoring_equals_the_eager_forward():
    import torch

    from workbench.llm.generation import sequence_logp

    model, ids, mask = _model_and_prompts()
    out = _sample(model, ids, mask, 0)
    with torch.no_grad():
        eager = sequence_logp(model, ids, mask, out.tokens, out.completion_mask, cuda_graphs=False)
        for _ in range(4):
            graphed = sequence_logp(model, ids, mask, out.tokens, out.completion_mask)
    assert any(name.startswith("sequence_logp") and s.graph is not None for name, s in _slots(model).items())
    torch.testing.assert_close(graphed, eager, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", [1, 8])
def test_a_replayed_grpo_update_makes_the_eager_updates_weights(group):
    """Distinct prompts (the full forward in the graph) and GRPO's groups of 8 (each distinct
    prompt's forward once, the rows' keys and values copied in the graph)."""
    import torch

    from workbench.algorithms import grpo, ppo_graphs

    model, ids, mask = _model_and_prompts(rows=16 // group, group=group)
    batches = []
    for seed in range(4):
        out = _sample(model, ids, mask, seed)
        rewards = (out.tokens[:, 0] % 3).float().cpu().numpy()  # differ within groups: a gradient
        batches.append(
            tuple(x[None] for x in (ids, mask, out.tokens, out.completion_mask, out.logp, out.logp - 0.01))
            + (rewards[None],)
        )
    results = {}
    for graphs in (False, True):
        learner = copy.deepcopy(model)
        # capturable in both: the graphed update makes Adam capturable, whose arithmetic differs
        optimizer = torch.optim.Adam(learner.parameters(), lr=1e-3, capturable=True)
        cfg = dataclasses.replace(grpo.GRPOConfig(), group_size=8, cuda_graphs=graphs)
        stats = [grpo.grpo_update(learner, optimizer, cfg, *batch) for batch in batches]
        results[graphs] = learner, stats
    slot = ppo_graphs._UPDATE[results[True][0]]
    assert slot.graph is not None and not slot.failed  # one eager update, then replays
    assert len(slot.inputs) == (7 if group == 1 else 10)  # the batch, then the distinct prompts, padded, and rows

    def moved(learner):  # what the four updates did to the weights, flat
        return torch.cat([(a - b).detach().flatten() for a, b in zip(learner.parameters(), model.parameters())])

    # the same direction and size, not bit for bit: the backward's atomic adds sum in any
    # order, and Adam turns a gradient of ~0 into a step of ±lr whatever its rounding
    eager, graphed = moved(results[False][0]), moved(results[True][0])
    assert torch.nn.functional.cosine_similarity(eager, graphed, dim=0) > 0.99
    assert float(graphed.norm()) == pytest.approx(float(eager.norm()), rel=0.05)
    assert [s["perf/update_cuda_graph"] for s in results[True][1]] == [1.0] * 4
    assert [s["perf/update_cuda_graph"] for s in results[False][1]] == [0.0] * 4
    for a, b in zip(results[False][1], results[True][1]):
        assert a["losses/loss"] == pytest.approx(b["losses/loss"], rel=1e-3, abs=1e-5)
        assert a["losses/kl"] == pytest.approx(b["losses/kl"], rel=1e-3, abs=1e-6)


def test_reference_scoring_of_repeated_prompts_replays_each_prompt_once():
    """GRPO's groups: the reference's graph runs each distinct prompt's forward once and
    scores as the full forward does; a batch in which two groups drew one prompt (3
    distinct of 4, padded back to 4) replays the same graph, captured once."""
    import torch

    from workbench.algorithms import grpo
    from workbench.llm.generation import sequence_logp

    four = grpo.task.train[:4]
    batches = [_model_and_prompts(prompts=prompts, group=8)[1:] for prompts in (four, [four[0], *four[:3]])]
    model, _, _ = _model_and_prompts(prompts=four, group=8)
    for step in range(6):
        ids, mask = batches[step % 2]
        out = _sample(model, ids, mask, step)
        with torch.no_grad():
            full = sequence_logp(model, ids, mask, out.tokens, out.completion_mask, cuda_graphs=False)
            graphed = sequence_logp(model, ids, mask, out.tokens, out.completion_mask)
        live = out.completion_mask.bool()
        torch.testing.assert_close(graphed[live], full[live], rtol=1e-4, atol=1e-5)
    scoring = {name: slot for name, slot in _slots(model).items() if "logp" in name}
    assert list(scoring) == ["shared_logp[32x%dx4/4]@1.0" % ids.shape[1]]
    assert all(slot.graph is not None and not slot.failed for slot in scoring.values())
    assert [slot.calls for slot in scoring.values()] == [6]  # one slot all along: captured once
