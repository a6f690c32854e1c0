"""The interquartile mean: a pure function of the returns."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.evaluation import EvaluationResult, iqm


def test_iqm_is_scipys_trimmed_mean_at_a_quarter():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 5, 7, 8, 10, 33):
        values = rng.normal(size=n)
        cut = n // 4
        middle = np.sort(values)[cut : n - cut]
        assert iqm(values) == pytest.approx(middle.mean())


def test_iqm_ignores_the_outer_quarters_and_not_the_order():
    assert iqm([0, 0, 10, 10, 10, 10, 1000, 1000]) == 10
    assert iqm([1000, 10, 0, 10, 1000, 10, 0, 10]) == 10


def test_iqm_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        iqm([])


def test_result_summary_frame_and_html():
    result = EvaluationResult(
        returns=(10.0, 20.0, 30.0, 40.0),
        lengths=(10, 20, 30, 40),
        envs=(0, 1, 0, 1),
        seeds=(1_000_001,),
        cell_seeds=(1,),
        iteration=7,
    )
    assert result.episodes == 4 and result.mean == 25.0 and result.iqm == 25.0
    assert result.std == pytest.approx(np.std([10, 20, 30, 40]))
    frame = result.to_frame()
    assert list(frame.columns) == ["return", "length", "env"] and frame.index.name == "episode"
    assert frame["length"].tolist() == [10, 20, 30, 40]
    assert "held-out env seeds 1000001 (training's: 1)" in repr(result) and "after iteration 7" in repr(result)
    assert "<table>" in result._repr_html_()
