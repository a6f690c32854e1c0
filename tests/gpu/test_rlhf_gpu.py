"""RLHF's reward model on a real GPU (skipped without CUDA): it scores on the GPU as on the
CPU, trains there, and under GPUOnly the reward fragment's copy is on CUDA and scores the
completions GRPO learns from. The CPU twins: tests/llm/test_reward_model.py."""

from __future__ import annotations

import dataclasses

import pytest

from tests.gpu import ON_TORCH_GPU

pytestmark = ON_TORCH_GPU
pytest.importorskip("transformers")


def test_the_reward_model_scores_and_trains_on_the_gpu_as_on_the_cpu():
    import torch

    from workbench.llm import AdditionTask, char_tokenizer, tiny_causal_lm
    from workbench.llm.reward_model import preference_accuracy, reward_model_from, train_reward_model

    tok, task = char_tokenizer(), AdditionTask(9, seed=0)
    scorer = reward_model_from(tiny_causal_lm(tok, hidden=32, layers=2, heads=4, context=12, seed=0), tok)
    prompts, completions = task.train[:16], [str(i) for i in range(16)]
    on_cpu = scorer(prompts, completions)
    scorer.to("cuda:0")
    assert next(scorer.model.parameters()).is_cuda
    torch.testing.assert_close(torch.tensor(scorer(prompts, completions)), torch.tensor(on_cpu), rtol=1e-4, atol=1e-4)
    chosen = [task.answer(p) for p in prompts]
    rejected = [str(int(a) + 1) for a in chosen]
    before = preference_accuracy(scorer, prompts, chosen, rejected)
    losses = train_reward_model(scorer, prompts, chosen, rejected, steps=60, batch=8, lr=1e-2)
    assert sum(losses[-10:]) < sum(losses[:10])
    assert preference_accuracy(scorer, prompts, chosen, rejected) > before


def test_gpuonly_rlhf_scores_with_a_reward_model_on_cuda():
    import logging

    from distributed import Client, LocalCluster

    from workbench.algorithms import rlhf
    from workbench.llm import tiny_causal_lm
    from workbench.llm.reward_model import RewardModel, reward_model_from

    scorer = reward_model_from(
        tiny_causal_lm(rlhf.tokenizer, hidden=32, layers=2, heads=4, context=16, seed=1), rlhf.tokenizer
    )

    def score_on(reward_model, prompts, completions):
        rlhf.wb.log("test/reward_model_on_cuda", float(next(reward_model.model.parameters()).is_cuda))
        return rlhf.score_completions(reward_model, prompts, completions)

    cfg = dataclasses.replace(rlhf.cfg, prompts_per_step=8, group_size=4, hidden=32)
    namespace = dict(vars(rlhf), cfg=cfg, reward_model=scorer, score_completions=score_on)
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
        run = rlhf.build_fdg(namespace).run(iterations=2, steps=1, policy="gpuonly", cluster=client, progress=False)
    assert run.status == "finished", run.error
    assert run.metrics["test/reward_model_on_cuda"].tolist() == [1.0, 1.0]
    assert isinstance(run.state.fragments["reward"][0]["scorer"], RewardModel)
    assert len(set(run.metrics["charts/reward_mean"].tolist())) > 1
