"""What keeps GRPO's memory near one model per role: a replica's handed weights become its
model's own (the handed copy is freed, through the runtime, under inline and on a cluster),
clipping scales the gradients where they are, and an eager update frees its gradients.
(``weights_copy`` keeping the reference's weights in host memory is its doctest.)"""

from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch

pytest.importorskip("transformers")

import workbench as wb  # noqa: E402
from workbench.algorithms import grpo  # noqa: E402
from workbench.llm import load_weights, tiny_causal_lm, weights_copy  # noqa: E402
from workbench.llm.tokenizers import char_tokenizer  # noqa: E402

TOK = char_tokenizer()


def model(seed: int):
    return tiny_causal_lm(TOK, hidden=32, layers=2, heads=4, context=16, seed=seed)


def test_load_weights_keeps_the_models_tensors_and_frees_the_handed_copy():
    learner, policy = model(0), model(1)
    addresses = [p.data_ptr() for p in policy.parameters()]
    handed = weights_copy(learner)
    handed_refs = [weakref.ref(t) for t in handed.values()]
    load_weights(policy, handed)
    assert [p.data_ptr() for p in policy.parameters()] == addresses  # CUDA graphs read them there
    for name, tensor in policy.state_dict().items():
        assert torch.equal(tensor, learner.state_dict()[name])
        assert handed[name].data_ptr() == tensor.data_ptr()  # the dict now holds the model's own
    assert all(ref() is None for ref in handed_refs)  # nothing else kept the copy alive


def test_tied_embeddings_stay_one_tensor_through_the_copies():
    learner, policy = model(0), model(1)
    kept = weights_copy(learner)  # the learner's copy of the reference's weights: the embedding once
    assert kept["lm_head.weight"].data_ptr() == kept["model.embed_tokens.weight"].data_ptr()
    load_weights(policy, kept)
    assert policy.lm_head.weight is policy.model.embed_tokens.weight
    assert kept["lm_head.weight"].data_ptr() == policy.lm_head.weight.data_ptr()


def test_load_weights_refuses_a_state_dict_of_another_model_and_changes_nothing():
    policy, other = model(1), tiny_causal_lm(TOK, hidden=48, layers=2, heads=4, context=16, seed=2)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    handed = weights_copy(other)
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_weights(policy, handed)
    assert all(torch.equal(v, before[k]) for k, v in policy.state_dict().items())
    assert handed["lm_head.weight"].shape[1] == 48  # the caller's dict is left as it was


@pytest.mark.parametrize("layers", [1, 3], ids=["fewer-layers", "more-layers"])
def test_load_weights_given_a_state_dict_that_fits_in_part_changes_nothing(layers):
    """Same widths, another depth: most tensors fit, some are missing or extra. torch's
    load_state_dict copies the ones that fit before it raises; load_weights checks first."""
    policy = model(1)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    handed = weights_copy(tiny_causal_lm(TOK, hidden=32, layers=layers, heads=4, context=16, seed=2))
    kind, layer = ("missing keys", 1) if layers < 2 else ("unexpected keys", 2)
    with pytest.raises(RuntimeError, match=rf"nothing was loaded.*{kind} \(\d+\): model\.layers\.{layer}\."):
        load_weights(policy, handed)
    assert all(torch.equal(v, before[k]) for k, v in policy.state_dict().items())


def _gradients(seed: int):
    net = model(seed)
    ids = torch.randint(0, len(TOK), (4, 6))
    net(ids, labels=ids).loss.backward()
    return net, [p for p in net.parameters() if p.grad is not None]


@pytest.mark.parametrize("max_norm", [1e-3, 1e6, None])
def test_clipping_scales_the_gradients_in_place_as_clip_grad_norm(max_norm):
    net, params = _gradients(3)
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for copy, p in zip(copies, params):
        copy.grad = p.grad.clone()
    if max_norm:
        torch.nn.utils.clip_grad_norm_(copies, max_norm)  # torch's, on the copies: the reference
    expected = [copy.grad for copy in copies]
    buffers = [p.grad.data_ptr() for p in params]
    grpo._clip_gradients(params, max_norm)
    assert [p.grad.data_ptr() for p in params] == buffers  # scaled where they are: no flat copy
    for p, want in zip(params, expected):
        torch.testing.assert_close(p.grad, want, rtol=1e-6, atol=1e-9)
    if max_norm == 1e-3:
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        assert norm == pytest.approx(1e-3, rel=1e-4)


def test_an_eager_update_leaves_no_gradients_between_updates():
    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=2, group_size=4, hidden=32, context=16)
    net = grpo.make_model(cfg, TOK)
    optimizer = grpo.adam(net.parameters(), 1e-3)
    ids, mask = grpo.encode_prompts(TOK, ["1+2=", "3+4="] * 4, 6)
    out = grpo.generate_completions(net, TOK, ids, mask, cfg)
    before = [p.detach().clone() for p in net.parameters()]
    step = [x.unsqueeze(0) for x in (ids, mask, *out)]  # a run's [T = 1, N, …] batch
    grpo.grpo_update(net, optimizer, cfg, *step, step[-1], [[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]])
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))  # it learned
    assert all(p.grad is None for p in net.parameters())


def _loads_then_frees(target, weights):
    """The cells' ``load_weights``, checked where it runs (here or on a worker): once it
    returns, no tensor of the copy the replica was handed may be alive (the runtime, its
    mailbox or the namespace holding none of them)."""
    refs = [weakref.ref(t) for t in weights.values()]
    load_weights(target, weights)
    alive = sum(ref() is not None for ref in refs)
    if alive:
        raise AssertionError(f"{alive} tensors of the handed weights are still alive after loading")


def _loads_and_keeps(target, weights):
    """The negative control: ``load_state_dict`` alone, the cells' old way (the handed copy stays)."""
    refs = [weakref.ref(t) for t in weights.values()]
    target.load_state_dict(weights)
    alive = sum(ref() is not None for ref in refs)
    if alive:
        raise AssertionError(f"{alive} tensors of the handed weights are still alive after loading")


def _run(loader, policy, client=None):
    cfg = dataclasses.replace(
        grpo.GRPOConfig(), prompts_per_step=2, group_size=4, hidden=32, context=16, eval_every=10**6
    )
    fdg = grpo.build_fdg(dict(vars(grpo), cfg=cfg, load_weights=loader))
    return fdg.run(iterations=3, steps=1, policy=policy, cluster=client, progress=False)


def test_no_handed_copy_of_the_weights_outlives_its_loading_inline():
    assert _run(_loads_then_frees, "inline").iterations == 3
    with pytest.raises(Exception, match="still alive after loading"):
        _run(_loads_and_keeps, "inline")


def test_no_handed_copy_of_the_weights_outlives_its_loading_on_a_worker(client):
    assert _run(_loads_then_frees, wb.SingleLearnerCoarse(actors=1), client).iterations == 3
