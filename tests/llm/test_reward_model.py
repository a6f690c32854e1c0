"""A learned reward (RLHF): the reward model starts from the policy's transformer, scores a
text the same whatever shares its batch, learns from preference pairs by the Bradley–Terry
loss (lr 0 learns nothing), refuses what it cannot score with errors that say why, and, as
the reward fragment's state, scores the completions GRPO learns from under any policy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import workbench as wb  # noqa: E402
from workbench.algorithms import grpo, rlhf  # noqa: E402
from workbench.llm import AdditionTask, LLMInputError, RewardError, char_tokenizer, tiny_causal_lm  # noqa: E402
from workbench.llm.reward_model import (
    RewardModel,
    policy_preferences,
    preference_accuracy,  # noqa: E402
    reward_model_from,
    train_reward_model,
)
from workbench.llm.tasks import score_completions  # noqa: E402

TOK = char_tokenizer()
TASK = AdditionTask(9, seed=0)


def policy(seed: int = 0, context: int = 12):
    return tiny_causal_lm(TOK, hidden=32, layers=2, heads=4, context=context, seed=seed)


def test_the_reward_model_starts_from_the_policys_transformer_and_leaves_the_policy_alone():
    start = policy()
    before = {k: v.clone() for k, v in start.state_dict().items()}
    torch.manual_seed(5)
    expected_draw = torch.rand(3)
    torch.manual_seed(5)
    scorer = reward_model_from(start, TOK)
    assert torch.equal(torch.rand(3), expected_draw)  # the caller's random stream is left as it was
    body = scorer.model.model.state_dict()
    assert body.keys() == start.model.state_dict().keys()
    assert all(torch.equal(v, start.model.state_dict()[k]) for k, v in body.items())
    assert all(body[k].data_ptr() != v.data_ptr() for k, v in start.model.state_dict().items())  # a copy
    assert scorer.model.score.weight.shape == (1, 32)
    assert all(torch.equal(v, before[k]) for k, v in start.state_dict().items())


def gpt2_policy():
    """A model with learned absolute positions (GPT-2), where a text's positions matter."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(TOK),
            n_positions=16,
            n_embd=32,
            n_layer=2,
            n_head=4,
            pad_token_id=TOK.pad_token_id,
            eos_token_id=TOK.eos_token_id,
        )
    )


@pytest.mark.parametrize("make", [policy, gpt2_policy], ids=["llama", "gpt2"])
def test_a_texts_score_does_not_depend_on_what_shares_its_batch(make):
    """Left padding to the longest text, positions counted from each text's first token: a
    short text padded beside a long one scores as it does alone (with rotary positions, as
    Llama's, that holds anyway; with absolute ones, as GPT-2's, only by the positions)."""
    scorer = reward_model_from(make(), TOK)
    alone = scorer(["3+4="], ["7"])[0]
    beside = scorer(["3+4=", "9+9="], ["7", "18 18"])[0]
    assert beside == pytest.approx(alone, abs=1e-5)


def test_bradley_terry_training_ranks_the_chosen_higher_and_lr_zero_learns_nothing():
    prompts = TASK.train[:24]
    chosen = [TASK.answer(p) for p in prompts]
    rejected = [str(int(a) + 1) for a in chosen]
    scorer = reward_model_from(policy(), TOK)
    untouched = {k: v.clone() for k, v in scorer.model.state_dict().items()}
    train_reward_model(scorer, prompts, chosen, rejected, steps=5, batch=8, lr=0.0)
    assert all(torch.equal(v, untouched[k]) for k, v in scorer.model.state_dict().items())
    first_batch = np.random.default_rng(3).integers(0, len(prompts), 8)
    expected = -torch.nn.functional.logsigmoid(
        torch.tensor(scorer([prompts[i] for i in first_batch], [chosen[i] for i in first_batch]))
        - torch.tensor(scorer([prompts[i] for i in first_batch], [rejected[i] for i in first_batch]))
    ).mean()

    def margin() -> float:  # how much higher the chosen score, over all the pairs
        return float(np.mean(np.subtract(scorer(prompts, chosen), scorer(prompts, rejected))))

    before, ranked = margin(), preference_accuracy(scorer, prompts, chosen, rejected)
    losses = train_reward_model(scorer, prompts, chosen, rejected, steps=60, batch=8, lr=1e-2, seed=3)
    assert losses[0] == pytest.approx(expected.item(), rel=1e-4)  # the loss is Bradley–Terry's
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    assert margin() > before + 1.0 and preference_accuracy(scorer, prompts, chosen, rejected) > ranked
    assert not scorer.model.training  # left ready to score


def test_policy_preferences_pair_the_answer_with_the_policys_own_wrong_sample():
    from workbench.llm import sample
    from workbench.llm.tasks import decode_completions, encode_prompts

    start = policy(seed=4)
    prompts = TASK.train[:32]
    chosen, rejected = policy_preferences(start, TOK, TASK, prompts, max_new_tokens=3, seed=7)
    ids, mask = encode_prompts(TOK, prompts, TASK.prompt_width)
    out = sample(start, ids, mask, max_new_tokens=3, seed=7, eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id)
    samples = decode_completions(TOK, out.tokens)
    assert chosen == [TASK.answer(p) for p in prompts]
    for answer, sampled, worse in zip(chosen, samples, rejected):
        assert worse != answer
        if sampled.strip() != answer:
            assert worse == sampled
    assert any(s.strip() != a for s, a in zip(samples, chosen))  # an untrained policy: some of its own


def test_what_a_reward_model_cannot_score_is_refused_with_what_to_do():
    from transformers import LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=len(TOK),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=8,
        num_labels=2,
        pad_token_id=0,
    )
    with pytest.raises(LLMInputError, match="2 labels.*num_labels=1"):
        RewardModel(LlamaForSequenceClassification(config), TOK)
    config.num_labels, config.pad_token_id = 1, None
    with pytest.raises(LLMInputError, match="no pad_token_id.*tokenizer.pad_token_id"):
        RewardModel(LlamaForSequenceClassification(config), TOK)
    config.pad_token_id, config.vocab_size = 0, 5
    with pytest.raises(LLMInputError, match="tokenizer has 18 tokens"):
        RewardModel(LlamaForSequenceClassification(config), TOK)
    scorer = reward_model_from(policy(context=8), TOK)
    with pytest.raises(LLMInputError, match=r"context is 8 tokens; '3\+4=77777' is 9"):
        scorer(["3+4="], ["77777"])
    with pytest.raises(LLMInputError, match="one chosen and one rejected"):
        train_reward_model(scorer, ["3+4="], ["7"], [])
    with torch.no_grad():
        scorer.model.score.weight.fill_(float("nan"))
    with pytest.raises(
        RewardError, match=r"RewardModel\(LlamaForSequenceClassification\) returned nan for prompt '3\+4='"
    ):
        score_completions(scorer, ["3+4="], ["7"])


def test_a_run_without_a_trained_reward_model_says_how_to_make_one():
    with pytest.raises(
        wb.FragmentRuntimeError, match=r"fragment 'reward' \(init cell\)(.|\n)*no reward model.*reward_model_from"
    ):
        rlhf.build_fdg().run(iterations=1, steps=1, progress=False)


def test_a_peft_policy_is_refused_with_how_to_merge_it():
    from workbench.llm import with_lora

    with pytest.raises(LLMInputError, match="merge_and_unload"):
        reward_model_from(with_lora(policy(), rank=2), TOK)


def _rlhf_fdg(scorer, **changes):
    cfg = dataclasses.replace(rlhf.cfg, prompts_per_step=4, group_size=4, hidden=32, layers=2, **changes)
    return rlhf.build_fdg(dict(vars(rlhf), cfg=cfg, reward_model=scorer))


def test_the_reward_fragment_scores_completions_with_its_reward_model_under_inline_and_coarse(client):
    """The same seed under inline and on a worker (one generate replica): the same rewards,
    because the reward replica's copy of the reward model scores the same completions; the
    notebook's reward model itself is not changed by a run."""
    scorer = reward_model_from(tiny_causal_lm(TOK, hidden=32, layers=2, heads=4, context=16, seed=1), TOK)
    head = scorer.model.score.weight.clone()
    fdg = _rlhf_fdg(scorer)
    inline = fdg.run(iterations=2, steps=2, progress=False)
    coarse = fdg.run(iterations=2, steps=2, policy=wb.SingleLearnerCoarse(actors=1), cluster=client, progress=False)
    assert inline.status == coarse.status == "finished", (inline.error, coarse.error)
    rewards = inline.metrics["charts/reward_mean"].tolist()
    assert rewards == coarse.metrics["charts/reward_mean"].tolist()
    assert len(set(rewards)) > 1 and all(r not in (0.0, 1.0) for r in rewards)  # scores, not 0/1 answers
    held = coarse.state.fragments["reward"][0]["scorer"]
    assert isinstance(held, RewardModel) and held is not scorer  # the worker's own copy
    assert torch.equal(held.model.score.weight, head) and torch.equal(scorer.model.score.weight, head)


def test_a_checkpoint_holds_the_reward_model_a_resume_goes_on_with(tmp_path, client):
    """The reward fragment's reward model is saved like a network (its weights); a resume
    with the same replica count scores with the saved one, whatever the notebook's
    ``reward_model`` is by then."""
    import json

    used = reward_model_from(tiny_causal_lm(TOK, hidden=32, layers=2, heads=4, context=16, seed=1), TOK)
    other = reward_model_from(tiny_causal_lm(TOK, hidden=32, layers=2, heads=4, context=16, seed=2), TOK)
    namespace = dict(
        vars(rlhf), cfg=dataclasses.replace(rlhf.cfg, prompts_per_step=4, group_size=4, hidden=32), reward_model=used
    )
    fdg = rlhf.build_fdg(namespace)
    first = fdg.run(
        iterations=2, steps=1, policy="coarse", cluster=client, progress=False, checkpoint_dir=str(tmp_path)
    )
    assert first.status == "finished", first.error
    manifest = json.loads(next(tmp_path.glob("iteration-*/manifest.json")).read_text())
    reward = manifest["fragments"]["reward"]
    assert all("scorer" in names for names in reward["saved"]) and not any(reward["recreated_by_init"])
    namespace["reward_model"] = other  # the notebook's reward model changed since
    resumed = fdg.run(iterations=1, steps=1, policy="coarse", cluster=client, progress=False, resume=str(tmp_path))
    assert resumed.status == "finished", resumed.error
    for replica in resumed.state.fragments["reward"]:
        held = replica["scorer"].model.state_dict()
        assert all(torch.equal(v, used.model.state_dict()[k]) for k, v in held.items())
    assert not torch.equal(used.model.model.embed_tokens.weight, other.model.model.embed_tokens.weight)


def test_the_reward_cell_scores_the_completions_it_is_given():
    """Inline, the reward replica's last ``rewards`` are its reward model's scores of the
    last step's prompts and completions, in order."""
    from workbench.llm.tasks import decode_completions

    scorer = reward_model_from(tiny_causal_lm(TOK, hidden=32, layers=2, heads=4, context=16, seed=1), TOK)
    run = _rlhf_fdg(scorer).run(iterations=1, steps=1, progress=False)
    state = {
        **run.state.fragments["prompts"][0],
        **run.state.fragments["generate"][0],
        **run.state.fragments["reward"][0],
    }
    expected = scorer(state["prompt_texts"], decode_completions(TOK, state["tokens"]))
    assert np.asarray(state["rewards"]).tolist() == pytest.approx(expected, abs=1e-6)


def test_the_rlhf_cells_are_grpos_but_for_the_reward():
    other = [cell for cell in rlhf.FRAGMENT_CELLS if cell not in rlhf.REWARD_CELLS]
    assert other == [cell for cell in grpo.FRAGMENT_CELLS if not cell[0].startswith("%%fragment reward")]
