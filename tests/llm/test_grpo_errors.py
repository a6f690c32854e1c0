"""Bad input to GRPO's fragments: a clear error naming the fragment and the prompt."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("transformers")

from workbench.algorithms import grpo  # noqa: E402
from workbench.errors import FragmentRuntimeError  # noqa: E402
from workbench.llm import LLMInputError, RewardError, batched_reward, tiny_causal_lm  # noqa: E402
from workbench.llm.tasks import encode_prompts  # noqa: E402
from workbench.llm.tokenizers import char_tokenizer  # noqa: E402


def run_with(cfg_changes=None, **names):
    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=2, group_size=2, **(cfg_changes or {}))
    fdg = grpo.build_fdg(dict(vars(grpo), cfg=cfg, **names))
    return fdg, fdg.run(iterations=1, steps=1, progress=False)


def raises(prompt, completion):
    raise KeyError("no such answer")


def says_yes(prompt, completion):
    return "yes"


def not_a_number(prompt, completion):
    return float("nan")


@batched_reward
def one_short(prompts, completions):
    return [1.0] * (len(prompts) - 1)


@pytest.mark.parametrize(
    "reward_fn, message",
    [
        (raises, "the reward function raises raised KeyError: 'no such answer' for prompt '"),
        (says_yes, "the reward function says_yes returned 'yes' (a str) for prompt '"),
        (not_a_number, "the reward function not_a_number returned nan for prompt '"),
        (one_short, "the reward function one_short returned 3 rewards for 4 completions (first prompt '"),
    ],
)
def test_a_bad_reward_function_names_the_reward_fragment_and_the_prompt(reward_fn, message):
    with pytest.raises(FragmentRuntimeError) as info:
        run_with(reward_fn=reward_fn)
    text = str(info.value)
    assert "fragment 'reward'" in text and f"{RewardError.__name__}: {message}" in text


def test_a_prompt_longer_than_the_context_names_the_generate_fragment_and_the_prompt():
    with pytest.raises(FragmentRuntimeError) as info:
        run_with({"context": 6})
    text = str(info.value)
    assert "fragment 'generate'" in text and "positions but the model's context is 6" in text
    assert "lower max_new_tokens" in text and "prompt '" in text


def test_a_prompt_longer_than_the_prompt_width_is_named():
    with pytest.raises(LLMInputError, match=r"prompt '123\+456=' is 8 tokens, longer than the prompt width 6"):
        encode_prompts(grpo.tokenizer, ["1+2=", "123+456="], 6)


def test_a_tokenizer_that_does_not_fit_the_model_names_the_sizes():
    small = tiny_causal_lm(char_tokenizer("0123"), context=16)  # 7 tokens
    with pytest.raises(FragmentRuntimeError) as info:
        run_with({"model": small})
    text = str(info.value)
    assert "fragment 'learner'" in text and "the tokenizer has 18 tokens but the model's embedding has 7 rows" in text


def test_a_model_path_that_is_not_a_directory_says_there_is_no_hub():
    from workbench.llm import load_causal_lm

    with pytest.raises(LLMInputError, match="not a local directory.*no model hub"):
        load_causal_lm("Qwen/Qwen2.5-0.5B", grpo.tokenizer)


def test_after_a_reward_error_the_fdg_keeps_the_failed_run_and_runs_again():
    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=2, group_size=2)
    namespace = dict(vars(grpo), cfg=cfg, reward_fn=says_yes)
    fdg = grpo.build_fdg(namespace)
    with pytest.raises(FragmentRuntimeError):
        fdg.run(iterations=1, steps=1, progress=False)
    assert fdg.last_run.status == "failed" and "says_yes" in str(fdg.last_run.error)
    namespace["reward_fn"] = grpo.reward_fn  # the cell fixed and re-run
    assert fdg.run(iterations=1, steps=1, progress=False).status == "finished"
