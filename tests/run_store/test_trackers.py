"""The optional trackers through the metric-logger interface, on real runs; skipped where
MLflow or W&B is not installed (pip install "workbench-rl[trackers]")."""

from __future__ import annotations

import pytest

from workbench.profiling import MLflowLogger, WandbLogger, mlflow_available, wandb_available

from .conftest import toy_fdg


@pytest.mark.skipif(not mlflow_available(), reason="MLflow is not installed")
def test_mlflow_keeps_every_iteration_in_its_local_store(tmp_path):
    logger = MLflowLogger(tmp_path / "mlruns", experiment="toy", run_name="lr-0.5", params={"cfg.lr": 0.5})
    run = toy_fdg(lr=0.5).run(iterations=3, steps=6, progress=False, run_store="off", loggers=[logger])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    (kept,) = client.search_runs([client.get_experiment_by_name("toy").experiment_id])
    assert kept.info.status == "FINISHED" and kept.info.run_name == "lr-0.5"
    assert kept.data.params == {"cfg.lr": "0.5"}
    history = client.get_metric_history(kept.info.run_id, "charts/episodic_return")
    assert [(m.step, m.value) for m in history] == [
        (row["env_steps"], row["charts/episodic_return"]) for row in run.rows if "charts/episodic_return" in row
    ]
    assert "time/env_0_ compute_s" in kept.data.metrics  # a name MLflow refuses, made one it takes


@pytest.mark.skipif(not wandb_available(), reason="W&B is not installed")
def test_wandb_offline_writes_a_run_to_sync_later(tmp_path):
    logger = WandbLogger(tmp_path, project="toy", run_name="lr-0.5", params={"cfg.lr": 0.5})
    toy_fdg(lr=0.5).run(iterations=3, steps=6, progress=False, run_store="off", loggers=[logger])
    import wandb

    wandb.teardown()  # W&B's service writes the run's records when it has finished, as at exit
    (written,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    data = written.read_bytes()  # W&B's own record log: the names it holds are plain bytes in it
    assert b"charts/episodic_return" in data and b"cfg.lr" in data and b"lr-0.5" in data
    logger.close()  # closing twice does nothing
