"""The HTML report is self-contained; the loggers write what the run recorded."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from tests.profiling.test_accounting import sleepy_fdg
from workbench.profiling import CSVLogger, TensorBoardLogger, tensorboard_available
from workbench.profiling.report import ALLOWED_URLS


@pytest.fixture(scope="module")
def run():
    return sleepy_fdg().run(iterations=4, steps=5, policy="inline", progress=False)


def test_report_is_self_contained(run, tmp_path):
    path = run.report(tmp_path / "profile.html")
    text = open(path, encoding="utf-8").read()
    for name in ("env", "learner", "actor", "env+learner+actor[0]"):
        assert name in text
    assert "Bokeh" in text and html.escape(run.plan_text.splitlines()[0]) in text
    urls = set(re.findall(r"https?://[^\s\"'<>()\\`]*", text))
    # allowed: XML namespace names only (identifiers a browser never fetches)
    assert urls <= set(ALLOWED_URLS), sorted(urls - set(ALLOWED_URLS))
    assert not re.search(r"<(script|link)[^>]+(src|href)=", text)


def test_fdg_run_feeds_loggers(tmp_path):
    logger = CSVLogger(tmp_path / "m.csv")
    run = sleepy_fdg().run(iterations=3, steps=4, policy="inline", progress=False, loggers=[logger])
    assert logger._file.closed
    df = pd.read_csv(tmp_path / "m.csv")
    assert list(df["iteration"]) == [0, 1, 2]
    assert {"charts/SPS", "charts/episodic_return", "time/env_compute_s", "wire/bytes"} <= set(df.columns)
    assert df["env_steps"].tolist() == run.metrics["env_steps"].tolist()


def test_csv_widens_its_header(tmp_path):
    with CSVLogger(tmp_path / "m.csv") as log:
        log.log({"iteration": 0, "a": 1.0})
        log.log({"iteration": 1, "a": 2.0, "b": 3.0})
    df = pd.read_csv(tmp_path / "m.csv")
    assert list(df.columns) == ["iteration", "a", "b"] and df["b"].isna().tolist() == [True, False]


@pytest.mark.skipif(not tensorboard_available(), reason="tensorboard is not installed")
def test_tensorboard_logger(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = sleepy_fdg().run(iterations=3, steps=4, policy="inline", progress=False, log_dir=str(tmp_path))
    assert (tmp_path / "metrics.csv").exists()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "charts/SPS" in tags and "losses/none" not in tags
    events = acc.Scalars("charts/episodic_return")
    assert [e.step for e in events] == run.metrics["env_steps"].tolist()
    assert events[-1].value == pytest.approx(run.rows[-1]["charts/episodic_return"], rel=1e-6)


def test_tensorboard_logger_needs_tensorboard(tmp_path):
    if tensorboard_available():
        pytest.skip("tensorboard is installed")
    with pytest.raises(ImportError, match="pip install tensorboard"):
        TensorBoardLogger(tmp_path)
