"""A training run's record: per-iteration metrics, throughput, and whether it solved.

Example:
    >>> run = Run(policy_name="inline", iterations=2, steps=4)
    >>> run.record(IterationRecord(0, env_steps=32, metrics={"charts/episodic_return": [9.0, 11.0]}))
    >>> run.mean_return()
    10.0
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

from workbench.runtime.driver import IterationRecord

__all__ = ["Run", "RETURN_METRIC"]

#: The metric fragments log episode returns under (CleanRL's name).
RETURN_METRIC = "charts/episodic_return"


@dataclass
class Run:
    """What a call to ``run`` did. Returned by ``fdg.run(...)`` and ``%fdg run``."""

    policy_name: str
    iterations: int
    steps: int
    target_return: float | None = None
    window: int = 20
    started: float = field(default_factory=time.perf_counter)
    status: str = "running"
    error: BaseException | None = None
    plan_text: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)
    env_steps: int = 0
    solved_at: dict[str, float] | None = None
    _episodes_at: list[int] = field(default_factory=list, repr=False)
    #: the final fragment states, when the run was asked to keep them (resume from it)
    state: Any = None
    #: policy="auto": what each candidate policy measured
    auto_table: list[dict] | None = None
    #: per-iteration metric loggers (``log(row)``/``close()``), fed by ``FDG.run(loggers=...)``
    loggers: list = field(default_factory=list, repr=False)
    #: what happened to the run's placement: re-placements, lost workers, checkpoints
    #: (dicts with ``iteration``, ``event`` and ``message``)
    events: list[dict] = field(default_factory=list)
    #: the concrete policy of the run's last stretch, and the FDG it ran (for checkpoints)
    policy: Any = field(default=None, repr=False)
    fdg: Any = field(default=None, repr=False)
    #: checkpoints written by this run (directories), oldest first
    checkpoints: list[str] = field(default_factory=list)
    #: finished iterations run again after lost workers (rewound to the newest snapshot)
    lost_iterations: int = 0

    # -- recording ---------------------------------------------------------------------
    def record(self, rec: IterationRecord) -> None:
        elapsed = time.perf_counter() - self.started
        self.env_steps += rec.env_steps
        self.episode_returns.extend(rec.metrics.get(RETURN_METRIC, []))
        row: dict[str, Any] = {
            "iteration": rec.iteration,
            "time_s": elapsed,
            "env_steps": self.env_steps,
            "charts/SPS": self.env_steps / elapsed if elapsed > 0 else 0.0,
            "wire/bytes": rec.wire_bytes,
        }
        for name, values in rec.metrics.items():
            if values:
                row[name] = sum(values) / len(values)
        row["charts/mean_return_last_%d" % self.window] = self.mean_return()
        for frag, seconds in rec.compute_seconds.items():
            row[f"time/{frag}_compute_s"] = seconds
        for name, seconds in rec.comm_seconds.items():
            row[f"time/{name}_s"] = seconds
        self.rows.append(row)
        self._episodes_at.append(len(self.episode_returns))
        if self.solved_at is None and self.is_solved():
            self.solved_at = {"iteration": rec.iteration, "time_s": elapsed, "env_steps": self.env_steps}

    def rewind(self, iteration: int) -> int:
        """Forget iterations ≥ ``iteration`` (they are run again after a lost worker);
        return how many were dropped."""
        keep = sum(1 for row in self.rows if row["iteration"] < iteration)
        dropped = len(self.rows) - keep
        if dropped:
            del self.rows[keep:]
            del self._episodes_at[keep:]
            self.env_steps = self.rows[-1]["env_steps"] if self.rows else 0
            del self.episode_returns[self._episodes_at[-1] if self._episodes_at else 0:]
            if self.solved_at is not None and self.solved_at["iteration"] >= iteration:
                self.solved_at = None
        return dropped

    def note(self, event: str, message: str, iteration: int | None = None) -> None:
        """Record (and say, in the notebook and the ``workbench`` log) what happened."""
        import logging

        self.events.append({"iteration": iteration, "event": event, "message": message,
                            "time": time.time()})
        logging.getLogger("workbench").warning(message)
        print(f"workbench: {message}", flush=True)

    def checkpoint(self, path: str, *, keep: int | None = 3) -> str:
        """Write the run's final state as a checkpoint in directory ``path``; return the
        checkpoint's own directory. Resume with ``fdg.run(resume=path, policy=…)`` — any
        policy, any number of workers (see :mod:`workbench.runtime.checkpoint`)."""
        from workbench.errors import CheckpointError
        from workbench.runtime.checkpoint import save_checkpoint

        if self.state is None or self.fdg is None or self.policy is None:
            raise CheckpointError(
                "this run kept no state to checkpoint (it ran with keep_state=False, or failed "
                "before its first iteration). Run with keep_state=True, or pass "
                "checkpoint_every=N and checkpoint_dir=… to write checkpoints as it goes."
            )
        written = str(save_checkpoint(path, self.state, self.fdg, self.policy, keep=keep))
        self.checkpoints.append(written)
        return written

    def mean_return(self) -> float | None:
        """Mean of the last ``window`` episode returns (None before any episode ends)."""
        last = self.episode_returns[-self.window:]
        return sum(last) / len(last) if last else None

    def is_solved(self) -> bool:
        mean = self.mean_return()
        return (self.target_return is not None and mean is not None
                and len(self.episode_returns) >= self.window and mean >= self.target_return)

    # -- reading -----------------------------------------------------------------------
    @property
    def completed_iterations(self) -> int:
        return len(self.rows)

    @property
    def wall_time(self) -> float:
        return self.rows[-1]["time_s"] if self.rows else 0.0

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.wall_time if self.wall_time else 0.0

    @property
    def metrics(self):
        """Per-iteration metrics as a pandas DataFrame (flat names, CleanRL style)."""
        import pandas as pd

        return pd.DataFrame(self.rows).set_index("iteration") if self.rows else pd.DataFrame()

    def profile(self, *, skip: int = 0):
        """Where the time went, per fragment and group replica (see ``workbench.profiling``)."""
        from workbench.profiling import profile

        return profile(self, skip=skip)

    def profile_by_iteration(self, *, skip: int = 0):
        """Per iteration and group replica: compute, wait, send, other vs the wall time."""
        from workbench.profiling import profile_by_iteration

        return profile_by_iteration(self, skip=skip)

    def report(self, path: str = "profile.html") -> str:
        """Write a self-contained HTML report (plots, plan, profile); return its path."""
        from workbench.profiling import write_report

        return write_report(self, path)

    def summary(self) -> str:
        mean = self.mean_return()
        mean_text = f"{mean:.1f}" if mean is not None else "n/a"
        text = (f"{self.status}: {self.completed_iterations}/{self.iterations} iterations under "
                f"{self.policy_name}, {self.env_steps:,} env steps in {self.wall_time:.1f} s "
                f"({self.steps_per_second:,.0f} env-steps/s); mean return of last "
                f"{self.window} episodes {mean_text}")
        if self.solved_at:
            text += (f"; solved (≥ {self.target_return:g}) at iteration {self.solved_at['iteration']}"
                     f" after {self.solved_at['time_s']:.2f} s, {self.solved_at['env_steps']:,} env steps")
        elif self.target_return is not None:
            text += f"; not solved (target {self.target_return:g})"
        return text

    def __repr__(self) -> str:
        return f"<Run {self.summary()}>"

    def _repr_html_(self) -> str:
        return f"<div style='font-family:monospace'><b>workbench run</b> — {html.escape(self.summary())}</div>"
