"""Language models as RL fragments: a tokenizer built from code, small causal LMs built from a
``transformers`` config, batched sampling with a KV cache, and the arithmetic task GRPO learns
(``workbench.algorithms.grpo``), and a reward model learned from preference pairs
(``workbench.algorithms.rlhf``). Needs ``pip install 'workbench-rl[llm]'`` (transformers, peft).

Example:
    >>> from workbench.llm import char_tokenizer, tiny_causal_lm, AdditionTask
    >>> tok = char_tokenizer()
    >>> AdditionTask(max_operand=9, seed=0).answer("3+4=")
    '7'
"""

from workbench.llm.errors import LLMInputError, RewardError
from workbench.llm.generation import Completions, sample, sequence_logp
from workbench.llm.models import (
    check_vocabulary,
    context_length,
    count_parameters,
    frozen,
    frozen_copy,
    load_causal_lm,
    load_weights,
    tiny_causal_lm,
    weights_copy,
    with_lora,
)
from workbench.llm.tasks import (
    AdditionTask,
    batched_reward,
    exact_answer_reward,
    heldout_accuracy,
    score_completions,
    warm_start,
)
from workbench.llm.prompt_task import PromptTask
from workbench.llm.reward_model import (
    RewardModel,
    policy_preferences,
    preference_accuracy,
    reward_model_from,
    train_reward_model,
)
from workbench.llm.tokenizers import ARITHMETIC_ALPHABET, char_tokenizer

__all__ = [
    "LLMInputError",
    "RewardError",
    "Completions",
    "sample",
    "sequence_logp",
    "check_vocabulary",
    "context_length",
    "count_parameters",
    "frozen",
    "frozen_copy",
    "load_causal_lm",
    "load_weights",
    "tiny_causal_lm",
    "weights_copy",
    "with_lora",
    "AdditionTask",
    "PromptTask",
    "batched_reward",
    "exact_answer_reward",
    "heldout_accuracy",
    "score_completions",
    "warm_start",
    "ARITHMETIC_ALPHABET",
    "char_tokenizer",
    "RewardModel",
    "policy_preferences",
    "preference_accuracy",
    "reward_model_from",
    "train_reward_model",
]
