"""IQM and the stratified bootstrap: hand-computed cases, scipy's trimmed mean, and the
properties that make them what Agarwal et al. (2021) describe."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from workbench.run_store import iqm, stratified_bootstrap_ci


@pytest.mark.parametrize(
    "scores, expected",
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], 4.5),  # 2 cut from each end: 3, 4, 5, 6
        ([8, 1, 7, 2, 6, 3, 5, 4], 4.5),  # order does not matter
        ([1, 2, 3, 1000], 2.5),  # 1 cut from each end: 2, 3
        ([0, 1, 2, 3, 4], 2.0),  # int(1.25) = 1 cut: 1, 2, 3
        ([1, 2, 3], 2.0),  # int(0.75) = 0 cut: the mean
        ([7.5], 7.5),
        (list(range(10)), 4.5),  # 2 cut: 2..7
    ],
)
def test_iqm_by_hand(scores, expected):
    assert iqm(scores) == pytest.approx(expected)


def test_iqm_is_scipys_quarter_trimmed_mean_along_any_axis():
    rng = np.random.default_rng(0)
    for shape in [(7,), (12, 3), (5, 4, 6), (9, 2)]:
        a = rng.standard_cauchy(shape)
        assert iqm(a) == pytest.approx(scipy_stats.trim_mean(a, 0.25, axis=None))
        for axis in range(a.ndim):
            np.testing.assert_allclose(iqm(a, axis=axis), scipy_stats.trim_mean(a, 0.25, axis=axis))


def test_iqm_ignores_a_few_wild_runs_and_is_the_mean_of_a_symmetric_middle():
    steady = np.array([10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0])
    wild = steady.copy()
    wild[0], wild[-1] = -1e6, 1e6
    assert iqm(wild) == iqm(steady) == pytest.approx(13.5)
    with pytest.raises(ValueError, match="no scores"):
        iqm([])


def test_the_interval_holds_the_point_and_keeps_trailing_axes():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(6, 2, 7)) + np.arange(7)  # runs × tasks × points of a curve
    point, lower, upper = stratified_bootstrap_ci(scores, reps=500, seed=0)
    assert point.shape == lower.shape == upper.shape == (7,)
    assert np.all(lower <= point) and np.all(point <= upper) and np.all(upper > lower)
    np.testing.assert_allclose(point, iqm(scores.reshape(12, 7), axis=0))  # pooled runs of every task
    again = stratified_bootstrap_ci(scores, reps=500, seed=0)
    np.testing.assert_array_equal(again[1], lower)  # a seed gives the same interval


def test_array_layout_and_list_of_strata_are_the_same():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(5, 3))
    as_array = stratified_bootstrap_ci(scores, np.mean, reps=300, seed=4)
    as_list = stratified_bootstrap_ci([scores[:, j] for j in range(3)], np.mean, reps=300, seed=4)
    assert as_array == pytest.approx(as_list)


def test_strata_are_resampled_within_never_across():
    # two tasks of constant scores, of different counts: a stratified resample always has
    # 4 zeros and 3 tens, so no statistic of it can vary …
    strata = [np.zeros(4), np.full(3, 10.0)]
    for statistic in (np.mean, iqm, np.median):
        point, lower, upper = stratified_bootstrap_ci(strata, statistic, reps=400, seed=0)
        assert lower == point == upper
    # … while pooling them as one stratum mixes the tasks and the interval opens
    _, lower, upper = stratified_bootstrap_ci(np.concatenate(strata), np.mean, reps=400, seed=0)
    assert upper - lower > 3
    # and a statistic counting one task's runs sees that count in every resample
    count = lambda sample, axis: (sample >= 5).sum(axis=axis)
    assert stratified_bootstrap_ci([np.arange(5.0), np.arange(5.0, 8.0)], count, reps=200, seed=0) == (3.0, 3.0, 3.0)


def test_95_percent_intervals_cover_the_true_iqm_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    trials, covered = 300, 0
    for _ in range(trials):
        runs = rng.normal(loc=2.0, size=(30, 2))  # symmetric: the population IQM is the mean, 2.0
        _, lower, upper = stratified_bootstrap_ci(runs, reps=600, seed=rng)
        covered += lower <= 2.0 <= upper
    assert 0.88 <= covered / trials <= 0.99


def test_more_runs_narrow_the_interval():
    rng = np.random.default_rng(5)
    widths = []
    for n in (5, 20, 80):
        _, lower, upper = stratified_bootstrap_ci(rng.normal(size=n), reps=1000, seed=0)
        widths.append(upper - lower)
    assert widths[0] > widths[1] > widths[2]


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="confidence"):
        stratified_bootstrap_ci([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError, match="at least one run"):
        stratified_bootstrap_ci([])
    with pytest.raises(ValueError, match="every stratum"):
        stratified_bootstrap_ci([np.ones(3), np.array([])])
    with pytest.raises(ValueError, match="reps"):
        stratified_bootstrap_ci([1.0], reps=0)


def test_the_examples_in_docs_runs_md_run():
    import doctest
    import pathlib

    import workbench as wb

    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "runs.md"
    result = doctest.testfile(str(page), module_relative=False, globs={"wb": wb}, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 5
