"""GRPO on a user's own prompts, tokenizer and model: a byte-level BPE tokenizer trained here
(it merges characters, adds a BOS token and pads on the right, as most tokenizers do), a
:class:`PromptTask` of plain prompt/answer lists. Nothing in the repository's character
tokenizer may be what makes the GRPO cells work."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from workbench.algorithms import grpo  # noqa: E402
from workbench.llm import LLMInputError, PromptTask, heldout_accuracy, tiny_causal_lm, warm_start  # noqa: E402
from workbench.llm.tasks import answer_targets, encode_prompts  # noqa: E402

# sums of two and of three operands: prompts of several token lengths, so batches are padded
TERMS = [(a, b) for a in range(5, 15) for b in range(5, 15)] + [
    (a, b, c) for a in (1, 2, 3) for b in (4, 5) for c in (6, 7)
]
PROMPTS = ["+".join(map(str, t)) + "=" for t in TERMS]
ANSWERS = [str(sum(t)) for t in TERMS]


def bpe_tokenizer(*, pad: bool = True, eos: bool = True, side: str = "right"):
    """A byte-level BPE tokenizer trained on sums (it learns multi-character tokens), which
    puts ``<s>`` before every text and pads on ``side``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator([f"{a}+{b}={a + b}" for a in range(60) for b in range(60)], trainer)
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        unk_token="<unk>",
        padding_side=side,
        **({"pad_token": "<pad>"} if pad else {}),
        **({"eos_token": "</s>"} if eos else {}),
    )


def test_prompts_are_left_padded_whatever_side_the_tokenizer_pads():
    prompts = ["13+14=", "1+2=", "13+14="]
    right, left = (
        encode_prompts(bpe_tokenizer(side="right"), prompts, 8),
        encode_prompts(bpe_tokenizer(side="left"), prompts, 8),
    )
    assert torch.equal(right[0], left[0]) and torch.equal(right[1], left[1])
    ids, mask = right
    assert mask[:, -1].all() and not mask[1, 0]  # every prompt ends at the last column: generation continues it
    assert (ids[mask.bool()] != bpe_tokenizer().pad_token_id).all()


@pytest.mark.parametrize(
    "pad, eos, missing",
    [(False, True, "no pad_token"), (True, False, "no eos_token"), (False, False, "no pad_token and no eos_token")],
)
def test_a_tokenizer_without_pad_or_eos_is_told_what_to_set(pad, eos, missing):
    tok = bpe_tokenizer(pad=pad, eos=eos)
    for build in (lambda: encode_prompts(tok, ["1+2="], 8), lambda: PromptTask(PROMPTS, ANSWERS, tokenizer=tok)):
        with pytest.raises(LLMInputError, match=missing) as caught:
            build()
        assert "tokenizer.pad_token = tokenizer.eos_token" in str(caught.value)


def test_a_prompt_tasks_widths_are_in_the_tokenizers_tokens():
    tok = bpe_tokenizer()
    task = PromptTask(PROMPTS, ANSWERS, tokenizer=tok, seed=3)
    assert task.prompt_width == max(len(tok(p)["input_ids"]) for p in PROMPTS)  # <s> included
    assert any(len(tok(p)["input_ids"]) < len(p) + 1 for p in PROMPTS)  # merged: tokens are not characters
    assert task.answer_width == max(len(tok(a + "</s>", add_special_tokens=False)["input_ids"]) for a in ANSWERS)
    assert sorted(task.train + task.heldout) == sorted(PROMPTS) and len(task.heldout) == round(0.2 * len(PROMPTS))
    assert not set(task.train) & set(task.heldout)
    targets = answer_targets(tok, task, PROMPTS)
    assert (targets["input_ids"][:, 0] != tok.bos_token_id).all()  # an answer continues its prompt: no <s>
    assert tok.batch_decode(targets["input_ids"], skip_special_tokens=True) == ANSWERS


@pytest.mark.parametrize(
    "prompts, answers, extra, message",
    [
        ("2+2=", None, {}, "a list of non-empty prompt strings"),
        (["2+2=", ""], None, {}, "a list of non-empty prompt strings"),
        (["2+2=", "3+3="], ["4"], {}, "one answer string per prompt: 2 prompts, 1 answers"),
        (["2+2=", "2+2="], ["4", "5"], {}, "given two answers, '4' and '5'"),
        (["2+2="], ["4"], {"heldout_fraction": 0.6}, "leave none to train on"),
        (["2+2=", "3+3="], None, {"heldout_fraction": 1.0}, r"heldout_fraction must be in \[0, 1\)"),
    ],
)
def test_a_prompt_task_refuses_what_cannot_make_a_task(prompts, answers, extra, message):
    with pytest.raises(LLMInputError, match=message):
        PromptTask(prompts, answers, tokenizer=bpe_tokenizer(), **extra)


def test_a_prompt_task_without_answers_trains_but_says_why_it_cannot_be_graded():
    task = PromptTask(PROMPTS, tokenizer=bpe_tokenizer())
    assert task.answer_width == 0 and len(task.sample(np.random.default_rng(0), 5)) == 5
    with pytest.raises(LLMInputError, match="made without answers"):
        task.answer(PROMPTS[0])
    with pytest.raises(LLMInputError, match="not one of this task's prompts"):
        PromptTask(PROMPTS, ANSWERS, tokenizer=bpe_tokenizer()).answer("7*7=")


def _grpo_run(tok, task, model, iterations=3):
    cfg = dataclasses.replace(
        grpo.GRPOConfig(), model=model, max_new_tokens=task.answer_width, eval_every=2, prompts_per_step=8, group_size=4
    )
    namespace = dict(
        vars(grpo),
        cfg=cfg,
        task=task,
        tokenizer=tok,
        reward_fn=lambda prompt, completion: float(completion.strip() == task.answer(prompt)),
    )
    return grpo.build_fdg(namespace).run(iterations=iterations, steps=1, policy="inline", progress=False)


def test_the_grpo_cells_run_on_your_own_prompts_tokenizer_and_model():
    """The unchanged cells with a BPE tokenizer that pads on the right: the same run, number
    for number, as with the same tokenizer padding on the left."""
    tok = bpe_tokenizer(side="right")
    task = PromptTask(PROMPTS, ANSWERS, tokenizer=tok, seed=1)
    model = tiny_causal_lm(tok, hidden=32, layers=2, context=task.prompt_width + task.answer_width, seed=2)
    losses = warm_start(model, tok, task, steps=20, batch=16, seed=2)
    assert len(losses) == 20 and all(np.isfinite(losses))
    before = heldout_accuracy(model, tok, task)
    assert 0.0 <= before <= 1.0
    right = _grpo_run(tok, task, model)
    left = _grpo_run(bpe_tokenizer(side="left"), task, model)
    assert right.status == left.status == "finished", (right.error, left.error)
    columns = ["charts/reward_mean", "losses/loss", "charts/completion_length", "charts/heldout_accuracy"]
    assert right.metrics[columns].equals(left.metrics[columns])
    assert right.metrics["charts/completion_length"].between(1, task.answer_width).all()
    assert right.shown_metrics[:2] == ["charts/reward_mean", "charts/heldout_accuracy"]


def test_sampling_a_padded_batch_does_not_depend_on_the_side_the_tokenizer_pads():
    """Prompts of 5 and 7 tokens in one batch: the generate cell's tokens and log-probabilities
    are the same whichever side the tokenizer pads (right padding would continue a short
    prompt from a pad token)."""
    cfg = dataclasses.replace(grpo.GRPOConfig(), max_new_tokens=3)
    prompts = [p for p in PROMPTS if p.count("+") == 2][:3] + PROMPTS[:3]
    model = tiny_causal_lm(bpe_tokenizer(), hidden=32, layers=2, context=12, seed=4)
    outs = []
    for side in ("right", "left"):
        tok = bpe_tokenizer(side=side)
        ids, mask = encode_prompts(tok, prompts, 7)
        assert not mask.all()  # padded
        torch.manual_seed(0)
        outs.append(grpo.generate_completions(model, tok, ids, mask, cfg))
    for right, left in zip(*outs):
        assert torch.equal(right, left)
