"""Aggregating runs the way Agarwal et al. (2021, "Deep RL at the Edge of the Statistical
Precipice"; their library is rliable) recommend: the interquartile mean (IQM) across runs,
with a confidence interval from a *stratified* bootstrap. Pure NumPy.

- :func:`iqm` — the mean of the middle half of the scores (25 % trimmed from each end,
  as ``scipy.stats.trim_mean(x, 0.25)``): robust to a few outlying seeds, yet less noisy
  than the median.
- :func:`stratified_bootstrap_ci` — resamples runs with replacement *within each stratum*
  (a task, an environment), never across: every resample has each task's run count, so the
  interval measures run-to-run luck, not the mix of tasks. Percentile interval, as rliable's.

    >>> iqm([1, 2, 3, 4, 5, 6, 7, 100])          # the middle half: 3, 4, 5, 6
    4.5
    >>> point, lower, upper = stratified_bootstrap_ci(np.arange(20.0), seed=0)
    >>> float(point), bool(lower < point < upper)
    (9.5, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["iqm", "stratified_bootstrap_ci"]

#: the share of scores cut from each end for the IQM
TRIM = 0.25


def iqm(scores, axis: int | None = None):
    """The interquartile mean of ``scores`` along ``axis`` (None: all of them): the mean
    after cutting ``int(0.25 · n)`` scores from each end of the sorted ``n``.

    >>> iqm([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], axis=0)   # per column: the middle two
    array([4., 5.])
    >>> iqm([5.0])
    5.0
    """
    a = np.asarray(scores, dtype=float)
    if axis is None:
        a, axis = a.reshape(-1), 0
    n = a.shape[axis]
    if n == 0:
        raise ValueError("iqm of no scores")
    cut = int(TRIM * n)
    middle = np.take(np.sort(a, axis=axis), np.arange(cut, n - cut), axis=axis)
    result = middle.mean(axis=axis)
    return float(result) if np.ndim(result) == 0 else result


def stratified_bootstrap_ci(
    scores,
    statistic: Callable = iqm,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = None,
):
    """``(point, lower, upper)``: ``statistic`` of ``scores`` and its ``confidence``
    percentile interval from ``reps`` stratified bootstrap resamples.

    ``scores``: an array of shape ``(runs, tasks, …)`` — each task a stratum, rliable's
    layout; a 1-D array is one task — or a list of strata, each an array ``(runs_i, …)``
    (strata of different run counts). Trailing axes (points of a learning curve) are kept:
    the results have their shape. ``statistic(sample, axis=0)`` reduces the pooled runs of
    a sample (``iqm``, ``np.mean``, ``np.median``).

    >>> # two tasks, each of constant scores: no resample can differ, so no width
    >>> stratified_bootstrap_ci([np.zeros(4), np.full(3, 10.0)], np.mean, seed=1)
    (4.285714285714286, 4.285714285714286, 4.285714285714286)
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    if reps < 1:
        raise ValueError(f"reps must be ≥ 1, got {reps!r}")
    strata = _strata(scores)
    rng = np.random.default_rng(seed)
    point = statistic(np.concatenate(strata, axis=0), axis=0)
    # one (reps, runs_i) draw of run indices per stratum: each resample keeps every stratum's count
    samples = np.concatenate([s[rng.integers(0, len(s), size=(reps, len(s)))] for s in strata], axis=1)
    values = np.asarray(statistic(samples, axis=1))
    tail = (1 - confidence) / 2
    lower, upper = np.quantile(values, [tail, 1 - tail], axis=0)
    return _plain(point), _plain(lower), _plain(upper)


def _strata(scores) -> list[np.ndarray]:
    if isinstance(scores, np.ndarray) or not isinstance(scores, Sequence) or not len(scores) or np.isscalar(scores[0]):
        a = np.asarray(scores, dtype=float)
        if a.ndim == 0 or a.shape[0] == 0:
            raise ValueError("stratified_bootstrap_ci needs at least one run's score")
        return [a] if a.ndim == 1 else [a[:, j] for j in range(a.shape[1])]
    strata = [np.asarray(s, dtype=float) for s in scores]
    if any(s.ndim == 0 or s.shape[0] == 0 for s in strata):
        raise ValueError("every stratum needs at least one run's score")
    if len({s.shape[1:] for s in strata}) > 1:
        raise ValueError(f"the strata's scores differ in shape beyond their runs: {[s.shape for s in strata]}")
    return strata


def _plain(value):
    return float(value) if np.ndim(value) == 0 else np.asarray(value)
