"""The language-model layer's domain errors (bad input to GRPO's fragments).

Each says what was wrong, where (the prompt, the reward function, the sizes) and what to do;
raised inside a cell, the runtime adds the fragment, replica and cell line around it.
"""

from __future__ import annotations

from workbench.errors import WorkbenchError

__all__ = ["LLMInputError", "RewardError"]


class LLMInputError(WorkbenchError, ValueError):
    """A model, tokenizer or prompt that cannot work together (a prompt longer than the
    model's context, a tokenizer whose vocabulary does not fit the model)."""


class RewardError(WorkbenchError, ValueError):
    """The user's reward function raised, or gave something other than one finite number
    per completion. Names the prompt and the completion it was scoring."""
