"""The supervised warm start's stopping rule: ``until`` stops at the first check whose greedy
accuracy on the fixed probe of training prompts reaches it, and never before."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from workbench.llm import AdditionTask, char_tokenizer, heldout_accuracy, load_causal_lm  # noqa: E402
from workbench.llm.tasks import warm_start  # noqa: E402

TOKENIZER = char_tokenizer()


def _model():
    return load_causal_lm(None, TOKENIZER, hidden=32, layers=1, heads=2, context=12, seed=0)


def _probe_accuracy(model, task, seed):
    probe = task.sample(np.random.default_rng(seed + 1), 256)  # the probe warm_start draws
    return heldout_accuracy(model, TOKENIZER, task, probe)


def test_until_stops_at_the_first_check_that_reaches_it_and_not_before():
    task, seed, every = AdditionTask(9, seed=0), 3, 20
    model = _model()
    steps = len(warm_start(model, TOKENIZER, task, steps=2000, batch=32, seed=seed, until=0.5, check_every=every))
    assert steps % every == 0 and steps < 2000, steps  # stopped at a check, before the limit
    assert _probe_accuracy(model, task, seed) >= 0.5
    # the same seed, one check shorter, without the rule: that check had not reached it
    earlier = _model()
    warm_start(earlier, TOKENIZER, task, steps=steps - every, batch=32, seed=seed)
    assert _probe_accuracy(earlier, task, seed) < 0.5


def test_an_accuracy_never_reached_runs_every_step():
    losses = warm_start(_model(), TOKENIZER, AdditionTask(9, seed=0), steps=30, batch=8, until=1.01, check_every=10)
    assert len(losses) == 30


def test_without_until_it_runs_every_step_and_never_checks():
    task = AdditionTask(9, seed=0)
    assert len(warm_start(_model(), TOKENIZER, task, steps=15, batch=8)) == 15


def test_a_check_interval_below_one_step_is_refused_before_any_training():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="check_every must be a positive number of steps"):
        warm_start(model, TOKENIZER, AdditionTask(9, seed=0), steps=5, until=0.5, check_every=0)
    assert all((v == before[k]).all() for k, v in model.state_dict().items())  # nothing trained
