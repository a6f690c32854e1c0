"""Experiment trackers as metric loggers: MLflow (a local store) and Weights & Biases (offline).

The same interface as :mod:`workbench.profiling.loggers` — ``log(row)`` per iteration,
``event(...)`` for what happened to the run, ``close()`` — so either goes in
``fdg.run(..., loggers=[...])``. Both are optional (``pip install "workbench-rl[trackers]"``):
:func:`mlflow_available` and :func:`wandb_available` say whether they are installed, without
importing them (MLflow's import alone takes seconds).

    fdg.run(..., loggers=[MLflowLogger("mlruns", experiment="cartpole", params={"cfg.lr": cfg.lr})])
    fdg.run(..., loggers=[WandbLogger("wandb-runs", project="cartpole")])   # then `wandb sync`
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import os
import re
import time
from pathlib import Path
from typing import Any

from workbench.profiling.loggers import _Logger

__all__ = ["MLflowLogger", "WandbLogger", "mlflow_available", "wandb_available"]


def mlflow_available() -> bool:
    """Whether MLflow (``mlflow`` or ``mlflow-skinny``) is installed."""
    return importlib.util.find_spec("mlflow") is not None


def wandb_available() -> bool:
    """Whether Weights & Biases (``wandb``) is installed."""
    return importlib.util.find_spec("wandb") is not None


def _numbers(row: dict[str, Any], skip: tuple[str, ...]) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in row.items()
        if name not in skip and isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    }


class MLflowLogger(_Logger):
    """Each iteration's numbers as MLflow metrics (step: ``env_steps``, or ``step="iteration"``),
    ``params`` as the run's parameters, events as an ``events.txt`` artifact at the end.

    ``tracking_uri``: a folder (MLflow's local file store, made when missing) or any MLflow
    URI (``sqlite:///mlflow.db``, ``http://…``). MLflow 3 keeps its file store in maintenance
    and refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is set: a folder given here sets it,
    as MLflow's message says to. Metric names keep MLflow's characters; others become ``_``
    (``time/env[0] compute_s`` → ``time/env_0_ compute_s``)."""

    def __init__(
        self,
        tracking_uri: str | os.PathLike = "mlruns",
        *,
        experiment: str = "workbench",
        run_name: str | None = None,
        params: dict[str, Any] | None = None,
        step: str = "env_steps",
    ) -> None:
        if not mlflow_available():
            raise ImportError('MLflowLogger needs MLflow: pip install "workbench-rl[trackers]" (or mlflow)')
        from mlflow.tracking import MlflowClient

        uri = os.fspath(tracking_uri)
        if "://" not in uri and not uri.startswith("file:"):
            Path(uri).mkdir(parents=True, exist_ok=True)
            uri = Path(uri).resolve().as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        self.step = step
        self._events: list[str] = []
        if params:
            from mlflow.entities import Param

            self.client.log_batch(
                self.run_id, params=[Param(_mlflow_name(k), str(v)[:6000]) for k, v in params.items()]
            )

    def log(self, row: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        step = int(row.get(self.step, row.get("iteration", 0)))
        now = int(time.time() * 1000)
        metrics = [
            Metric(_mlflow_name(name), value, now, step)
            for name, value in _numbers(row, ("iteration", self.step) if self.step != "env_steps" else ()).items()
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def event(self, kind: str, message: str, iteration: int, env_steps: int) -> None:
        self._events.append(f"iteration {iteration} ({env_steps} env steps) {kind}: {message}")

    def close(self) -> None:
        if self.run_id is None:
            return
        if self._events:
            self.client.log_text(self.run_id, "\n".join(self._events) + "\n", "events.txt")
        self.client.set_terminated(self.run_id, "FINISHED")
        self.run_id = None


def _mlflow_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", name)


class WandbLogger(_Logger):
    """Each iteration's numbers logged to a W&B run (step: ``env_steps``, or
    ``step="iteration"``), ``params`` as its config, events as a table at the end. Offline by
    default (``mode="offline"``: written under ``directory``, sent later with ``wandb sync``);
    ``mode="online"`` needs a W&B account."""

    def __init__(
        self,
        directory: str | os.PathLike = ".",
        *,
        project: str = "workbench",
        run_name: str | None = None,
        params: dict[str, Any] | None = None,
        step: str = "env_steps",
        mode: str = "offline",
    ) -> None:
        if not wandb_available():
            raise ImportError('WandbLogger needs Weights & Biases: pip install "workbench-rl[trackers]" (or wandb)')
        import wandb

        Path(directory).mkdir(parents=True, exist_ok=True)
        self.step = step
        self._events: list[list] = []
        self.run = wandb.init(
            mode=mode,
            dir=os.fspath(directory),
            project=project,
            name=run_name,
            config=dict(params or {}),
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", save_code=False),
        )

    def log(self, row: dict[str, Any]) -> None:
        step = int(row.get(self.step, row.get("iteration", 0)))
        values = _numbers(row, ("iteration", self.step) if self.step != "env_steps" else ())
        if values:
            self.run.log(values, step=step)

    def event(self, kind: str, message: str, iteration: int, env_steps: int) -> None:
        self._events.append([iteration, env_steps, kind, message])

    def close(self) -> None:
        if self.run is None:
            return
        if self._events:
            import wandb

            self.run.log(
                {"events": wandb.Table(columns=["iteration", "env_steps", "kind", "message"], data=self._events)}
            )
        self.run.finish()
        self.run = None
