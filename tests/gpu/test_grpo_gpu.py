"""GRPO on a real GPU (skipped without CUDA): the notebook's cells under GPUOnly train the
model on CUDA; sampling and scoring take CPU prompts to the model's device; after the weight
sync the generate replica's model equals the learner's bit for bit. Their CPU twins:
tests/llm/test_grpo.py and tests/llm/test_grpo_policies.py (the same cells on the CPU,
``test_gpuonly_falls_back_to_the_cpu_twin_without_a_gpu``)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from tests.gpu import ON_TORCH_GPU

pytestmark = ON_TORCH_GPU
pytest.importorskip("transformers")


def test_sampling_and_scoring_run_where_the_model_is():
    import torch

    from workbench.algorithms import grpo
    from workbench.llm.generation import sample, sequence_logp
    from workbench.llm.tasks import encode_prompts

    model = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer).to("cuda:0")
    ids, mask = encode_prompts(grpo.tokenizer, grpo.task.train[:8], grpo.task.prompt_width)  # on the CPU
    out = sample(
        model,
        ids,
        mask,
        max_new_tokens=4,
        eos_id=grpo.tokenizer.eos_token_id,
        pad_id=grpo.tokenizer.pad_token_id,
        seed=0,
    )
    assert out.tokens.is_cuda and out.logp.is_cuda
    with torch.no_grad():
        again = sequence_logp(model, ids, mask, out.tokens, out.completion_mask)
    live = out.completion_mask.bool()
    torch.testing.assert_close(again[live], out.logp[live], rtol=1e-4, atol=1e-4)


def test_gpuonly_grpo_trains_on_cuda_and_syncs_the_generate_replica():
    import torch
    from distributed import Client, LocalCluster

    from workbench.algorithms import grpo

    def grpo_update_on(model, *args, **kwargs):
        grpo.wb.log("test/learner_on_cuda", float(next(model.parameters()).is_cuda))
        return grpo.grpo_update(model, *args, **kwargs)

    def spread_reward(prompt: str, completion: str) -> float:
        # rewards that differ within a group whatever the untrained model samples: a zero
        # advantage everywhere (every answer wrong, the exact-answer reward) is no gradient
        # at all, and "it learned" would hang on a lucky right answer (it failed so on an H200)
        return float(sum(map(ord, completion)) % 5)

    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=8, group_size=4, learning_rate=1e-3)
    namespace = dict(vars(grpo), cfg=cfg, grpo_update=grpo_update_on, reward_fn=spread_reward)
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        run = grpo.build_fdg(namespace).run(iterations=3, steps=1, policy="gpuonly", cluster=client, progress=False)
    assert run.status == "finished" and run.policy.groups[0].device == "gpu"
    assert run.metrics["test/learner_on_cuda"].tolist() == [1.0] * 3
    assert np.isfinite(run.metrics["losses/loss"]).all()
    # the CUDA graphs in use: the update captured after its first (eager) run; generation's
    # decode step after two eager calls of it (three a generation), the prefill by the third
    assert run.metrics["perf/update_cuda_graph"].tolist() == [1.0] * 3
    assert run.metrics["perf/generate_cuda_graphs"].iloc[-1] >= 1
    learner, policy = run.state.fragments["learner"][0]["model"], run.state.fragments["generate"][0]["policy"]
    start = grpo.make_model(cfg, grpo.tokenizer)
    weights, synced = learner.state_dict(), policy.state_dict()
    assert all(torch.equal(weights[k].cpu(), synced[k].cpu()) for k in weights)  # the sync, bit for bit
    assert not all(torch.equal(weights[k].cpu(), v) for k, v in start.state_dict().items())  # it learned


def test_inline_on_the_gpu_trains_in_this_process_with_the_graphs():
    import torch

    import workbench as wb
    from workbench.algorithms import grpo

    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=8, group_size=4, learning_rate=1e-3, eval_every=1)
    start = grpo.make_model(cfg, grpo.tokenizer).to("cuda:0")
    cfg.model = start
    namespace = dict(vars(grpo), cfg=cfg, reward_fn=lambda p, c: float(sum(map(ord, c)) % 5))
    run = grpo.build_fdg(namespace).run(iterations=4, steps=1, policy=wb.Inline(device="gpu"), progress=False)
    assert run.status == "finished" and run.policy.groups[0].device == "gpu"
    learner = run.state.fragments["learner"][0]["model"]
    assert next(learner.parameters()).is_cuda
    # the learner's copy of the reference's starting weights: a small model's on its GPU
    # (weights_copy's DEVICE_COPY_SHARE), equal to the reference's own
    kept, reference = (
        run.state.fragments["learner"][0]["reference_weights"],
        run.state.fragments["reference"][0]["reference"],
    )
    assert all(t.is_cuda for t in kept.values())
    assert all(torch.equal(kept[name], t) for name, t in reference.state_dict().items())
    assert run.metrics["perf/update_cuda_graph"].tolist() == [1.0] * 4
    assert run.metrics["perf/generate_cuda_graphs"].iloc[-1] >= 2  # prefill and decode replay
    assert not all(torch.equal(a, b) for a, b in zip(learner.parameters(), start.parameters()))
    assert np.isfinite(run.metrics["charts/heldout_accuracy"]).all()


def test_a_weights_copy_stays_on_the_gpu_while_it_is_small_and_goes_to_the_host_when_not():
    import torch

    from workbench.algorithms import grpo
    from workbench.llm import weights_copy

    model = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer).to("cuda:0")
    kept, host = weights_copy(model), weights_copy(model, device_share=0.0)
    assert all(t.device == torch.device("cuda", 0) for t in kept.values())
    assert all(t.device.type == "cpu" for t in host.values())
    # copies, not views: training the model changes neither; a tied embedding stays one tensor
    before = kept["lm_head.weight"].clone()
    model.lm_head.weight.data.add_(1.0)
    assert torch.equal(kept["lm_head.weight"], before) and torch.equal(host["lm_head.weight"].cuda(), before)
    for copy in (kept, host):
        assert copy["lm_head.weight"].data_ptr() == copy["model.embed_tokens.weight"].data_ptr()
