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
from typing import Any, Literal

from workbench.config import DEFAULT_UNIT, rate_label

__all__ = [
    "IterationRecord",
    "Run",
    "RunEvent",
    "RunStatus",
    "EventKind",
    "RETURN_METRIC",
    "headline_text",
    "merge_shown",
    "rate_label",
    "DEFAULT_UNIT",
]

#: Where a run is: training, or how it ended.
RunStatus = Literal["running", "finished", "solved", "stopped", "interrupted", "failed"]
#: What can happen to a run's placement while it trains.
EventKind = Literal[
    "replaced",
    "re-placed",
    "worker lost",
    "edited",
    "updated",
    "not applied",
    "state left out",
    "state not saved",
    "edit overridden",
    "random streams shared",
    "cell left running",
    "clips skipped",
    "clip failed",
    "clip not shown",
]


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened to a run while it trained (also said in the notebook)."""

    kind: EventKind
    message: str
    iteration: int | None = None
    time: float = field(default_factory=time.time)


#: The metric fragments log episode returns under (CleanRL's name).
RETURN_METRIC = "charts/episodic_return"


@dataclass
class IterationRecord:
    """Everything the notebook learns about one finished iteration."""

    iteration: int
    env_steps: int = 0
    metrics: dict[str, list[float]] = field(default_factory=dict)
    compute_seconds: dict[str, float] = field(default_factory=dict)
    #: "group[replica] KIND" → seconds, KIND: wait, send, compute (its cells), other (the rest)
    comm_seconds: dict[str, float] = field(default_factory=dict)
    #: bytes sent between processes by the tasks that finished this iteration
    wire_bytes: int = 0
    #: env steps counted before this stretch (a resumed run's), reported by env replicas
    env_steps_base: int = 0
    #: per "group[replica]": env steps it took, and episodes it finished (returns logged)
    replica_env_steps: dict[str, int] = field(default_factory=dict)
    replica_episodes: dict[str, int] = field(default_factory=dict)
    #: warnings replicas sent with their reports: (the run's event kind, the message)
    notes: list[tuple[str, str]] = field(default_factory=list)
    #: metric names logged with ``prog_bar=True`` (the progress shows them), first logged first
    shown: list[str] = field(default_factory=list)
    #: (group, replica) → its metrics as its reports came; `settle` moves them to ``metrics``
    parts: dict[tuple[str, int], dict[str, list]] = field(default_factory=dict, repr=False)

    def settle(self) -> None:
        """Append the replicas' metrics to ``metrics`` in (group, replica) order, not in the
        order their reports came: the same seed then gives the same lists (the run's last 20
        episodes, a mean over learner replicas summed in one order) under every timing."""
        for _, part in sorted(self.parts.items()):
            for name, values in part.items():
                self.metrics.setdefault(name, []).extend(values)
        self.parts.clear()


@dataclass
class Run:
    """What a call to ``run`` did. Returned by ``fdg.run(...)`` and ``%fdg run``."""

    policy_name: str
    iterations: int
    steps: int
    target_return: float | None = None
    window: int = 20
    #: what one env step is called in what the run says (``--unit``: a language model's GRPO counts completions)
    unit: str = DEFAULT_UNIT
    started: float = field(default_factory=time.perf_counter)
    status: RunStatus = "running"
    error: BaseException | None = None
    plan_text: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)
    env_steps: int = 0
    solved_at: dict[str, float] | None = None
    #: env steps counted before this run (the run it resumed from); in ``env_steps``
    env_steps_base: int = 0
    #: per env replica ("group[replica]"): env steps taken and episodes finished in this run
    replica_env_steps: dict[str, int] = field(default_factory=dict)
    replica_episodes: dict[str, int] = field(default_factory=dict)
    #: envs stepped per step, all env replicas together (the latest iteration's)
    envs_per_step: int = 0
    _episodes_at: list[tuple[int, dict, dict]] = field(default_factory=list, repr=False)
    _base_taken: bool = field(default=False, repr=False)
    _env_replicas: tuple[str, ...] = field(default=(), repr=False)
    #: the final fragment states, when the run was asked to keep them (resume from it)
    state: Any = None
    #: policy="auto": what each candidate policy measured, a row each of ``policy``, ``rate``
    #: and the rate's ``unit`` (``"env-steps/s"``; GRPO's ``"completions/s"``), in the order tried
    auto_table: list[dict] | None = None
    #: what happened to the run's placement: re-placements, lost workers
    events: list[RunEvent] = field(default_factory=list)
    #: the concrete policy of the run's last stretch, and the FDG it ran (for checkpoints)
    policy: Any = field(default=None, repr=False)
    fdg: Any = field(default=None, repr=False)
    #: checkpoints written by this run (directories), oldest first
    checkpoints: list[str] = field(default_factory=list)
    #: finished iterations run again after lost workers (rewound to the newest snapshot)
    lost_iterations: int = 0
    #: env steps taken in iterations a stop left unfinished (in ``env_steps``, in no row)
    unfinished_env_steps: int = 0
    #: metrics the cells logged with ``wb.log(…, prog_bar=True)``: ``charts/`` ones first, each
    #: kind in the order first logged
    shown_metrics: list[str] = field(default_factory=list)
    #: clips of the agent made while it trained (``--video-every``), oldest first: each a
    #: :class:`workbench.training_clips.Clip` (shown inline in a notebook)
    clips: list = field(default_factory=list, repr=False)
    #: what makes them (set by the trainer): :meth:`wait_for_clips` waits on it
    clip_maker: Any = field(default=None, repr=False)
    _newest: dict[str, float] = field(default_factory=dict, repr=False)

    # -- recording ---------------------------------------------------------------------
    def record(self, rec: IterationRecord) -> None:
        elapsed = time.perf_counter() - self.started
        rec.settle()  # its replicas' metrics in replica order
        if not self._base_taken:
            # a resumed run goes on counting from its checkpoint's env steps
            self._base_taken = True
            self.env_steps_base = rec.env_steps_base
            self.env_steps += rec.env_steps_base
        self.env_steps += rec.env_steps
        for kind, message in rec.notes:
            self.note_once(kind, message, rec.iteration)
        self.episode_returns.extend(rec.metrics.get(RETURN_METRIC, []))
        for who, n in rec.replica_env_steps.items():
            self.replica_env_steps[who] = self.replica_env_steps.get(who, 0) + n
        for who, n in rec.replica_episodes.items():
            self.replica_episodes[who] = self.replica_episodes.get(who, 0) + n
        self._env_replicas = tuple(rec.replica_env_steps)  # this placement's env replicas
        if rec.env_steps:
            self.envs_per_step = rec.env_steps // max(1, self.steps)
        row: dict[str, Any] = {
            "iteration": rec.iteration,
            "time_s": elapsed,
            "env_steps": self.env_steps,
            "charts/SPS": (self.env_steps - self.env_steps_base) / elapsed if elapsed > 0 else 0.0,
            "wire/bytes": rec.wire_bytes,
        }
        for name, values in rec.metrics.items():
            if values:
                row[name] = sum(values) / len(values)
        row["charts/mean_return_last_%d" % self.window] = self.mean_return()
        row["charts/episodes"] = len(self.episode_returns)  # finished in this run so far
        self.shown_metrics = merge_shown(self.shown_metrics, rec.shown)
        self._newest.update((name, row[name]) for name in self.shown_metrics if name in row)
        for frag, seconds in rec.compute_seconds.items():
            row[f"time/{frag}_compute_s"] = seconds
        for name, seconds in rec.comm_seconds.items():
            row[f"time/{name}_s"] = seconds
        self.rows.append(row)
        self._episodes_at.append((len(self.episode_returns), dict(self.replica_env_steps), dict(self.replica_episodes)))
        if self.solved_at is None and self.is_solved():
            self.solved_at = {
                "iteration": rec.iteration,
                "time_s": elapsed,
                "env_steps": self.env_steps,
                "evidence": self.evidence(),
            }

    def __getstate__(self) -> dict:
        # a record sent elsewhere (a sweep's trial, back from its worker) keeps its clips,
        # not the thread and process that made them
        return {**self.__dict__, "clip_maker": None}

    def wait_for_clips(self, timeout: float | None = None) -> list:
        """Wait (up to ``timeout`` seconds) until the clip being made when training ended is in
        :attr:`clips` (``--video-every``; made at low priority, it may come after the run
        returns); return the clips."""
        if self.clip_maker is not None:
            self.clip_maker.join(timeout)
        return self.clips

    def env_steps_after(self, iterations: int) -> int | None:
        """The run's env steps once its first ``iterations`` iterations were recorded (None:
        not recorded yet, or not among this record's rows).

        >>> run = Run(policy_name="inline", iterations=2, steps=1)
        >>> run.rows = [{"iteration": 0, "env_steps": 4}, {"iteration": 1, "env_steps": 8}]
        >>> run.env_steps_after(2), run.env_steps_after(5)
        (8, None)
        """
        for row in reversed(self.rows):
            if row["iteration"] == iterations - 1:
                return row["env_steps"]
            if row["iteration"] < iterations - 1:
                return None
        return None

    def record_unfinished(self, steps: dict[str, int], base: int = 0) -> None:
        """Count ``steps`` ("group[replica]" → env steps) that the env replicas' own counters
        hold beyond the recorded iterations: steps of iterations a stop left unfinished (an
        asynchronous policy's actors ahead of the learner, a stuck cell's run). The envs took
        them, so ``env_steps`` and ``replica_env_steps`` include them and stay equal to the
        envs' own counts, which a resume continues from; no row shows them. ``base``: the
        count the stretch started from, taken when no iteration was ever recorded.

        >>> run = Run(policy_name="async", iterations=9, steps=5)
        >>> run.record_unfinished({"env[0]": 40})
        >>> run.env_steps, run.unfinished_env_steps, run.replica_env_steps
        (40, 40, {'env[0]': 40})
        """
        if not self._base_taken:  # nothing recorded yet: the resumed count starts here
            self._base_taken = True
            self.env_steps_base = base
            self.env_steps += base
        for who, n in steps.items():
            self.env_steps += n
            self.unfinished_env_steps += n
            self.replica_env_steps[who] = self.replica_env_steps.get(who, 0) + n

    def rewind(self, iteration: int) -> int:
        """Forget iterations ≥ ``iteration`` (they are run again after a lost worker);
        return how many were dropped."""
        keep = sum(1 for row in self.rows if row["iteration"] < iteration)
        dropped = len(self.rows) - keep
        if dropped:
            del self.rows[keep:]
            del self._episodes_at[keep:]
            self.env_steps = self.rows[-1]["env_steps"] if self.rows else self.env_steps_base
            episodes, steps_by, episodes_by = self._episodes_at[-1] if self._episodes_at else (0, {}, {})
            del self.episode_returns[episodes:]
            self.replica_env_steps, self.replica_episodes = dict(steps_by), dict(episodes_by)
            if self.solved_at is not None and self.solved_at["iteration"] >= iteration:
                self.solved_at = None
            self._newest = {name: row[name] for row in self.rows for name in self.shown_metrics if name in row}
        return dropped

    def note(self, kind: EventKind, message: str, iteration: int | None = None) -> None:
        """Record (and say, in the notebook and the ``workbench`` log) what happened."""
        import logging

        self.events.append(RunEvent(kind, message, iteration))
        logging.getLogger("workbench").warning(message)
        print(f"workbench: {message}", flush=True)

    def note_once(self, kind: EventKind, message: str, iteration: int | None = None) -> None:
        """:meth:`note`, unless the same message was said already in this run."""
        if not any(e.kind == kind and e.message == message for e in self.events):
            self.note(kind, message, iteration)

    def checkpoint(self, path: str, *, keep: int | None = 3) -> str:
        """Write the run's final state as a checkpoint in directory ``path``; return the
        checkpoint's own directory. Resume with ``fdg.run(resume=path, policy=…)`` — any
        policy, any number of workers (see :mod:`workbench.runtime.state.checkpoint`)."""
        from workbench.errors import CheckpointError
        from workbench.runtime.state.checkpoint import save_checkpoint

        if self.state is None or self.fdg is None or self.policy is None:
            raise CheckpointError(
                "this run kept no state to checkpoint (it ran with keep_state=False, or failed "
                "before its first iteration). Run with keep_state=True, or pass "
                "checkpoint_dir=… (and checkpoint_every=N, or every 5-10 s of training) to write "
                "checkpoints as it goes."
            )
        written = str(
            save_checkpoint(
                path,
                self.state,
                self.fdg,
                self.policy,
                keep=keep,
                warn=lambda text: self.note_once("state not saved", text),
            )
        )
        self.checkpoints.append(written)
        return written

    def evaluate(self, episodes: int = 10, *, seed: int | None = None):
        """Play the run's final state for ``episodes`` episodes without learning (no learner
        runs, the state is unchanged), greedily where the cells ask ``wb.evaluating()``, on
        held-out env seeds (or ``seed``); an :class:`~workbench.evaluation.EvaluationResult`
        of per-episode returns and lengths, mean, std and IQM (docs/evaluation.md)."""
        from workbench.evaluation import evaluate

        return evaluate(self, episodes, seed=seed)

    @staticmethod
    def is_checkpoint_values(values: Any) -> bool:
        """Whether a fragment replica's kept ``values`` are a checkpoint file's encoding (a run
        loaded from its store): a resume turns them into objects again, nothing else does."""
        from workbench.runtime.state.portable import PortableState

        return isinstance(values, PortableState)

    @staticmethod
    def restore_checkpoint_values(namespace: dict[str, Any], values: Any) -> list[str]:
        """Lay a checkpoint file's encoded ``values`` over ``namespace`` (what the fragment's
        init cell built), as a resume does; return the names not restored. Raises ValueError
        for a value that does not fit what the init cell built."""
        from workbench.runtime.state.portable import restore_into

        return restore_into(namespace, values)

    def show(self, episodes: int = 1, *, seed: int | None = None, fps: float = 50):
        """``episodes`` evaluation episodes of the final state as a :class:`~workbench.evaluation.Video`
        a notebook shows inline (an mp4 in a ``<video>``; see :meth:`evaluate`)."""
        from workbench.evaluation import show

        return show(self, episodes, seed=seed, fps=fps)

    def headline(self) -> list[tuple[str, float]]:
        """``(name, newest value)`` of each metric logged with ``prog_bar=True`` (see
        ``wb.log``), in the order first logged: what the progress bar shows beside the return.

        >>> run = Run(policy_name="inline", iterations=1, steps=1)
        >>> run.record(IterationRecord(0, metrics={"charts/reward_mean": [0.5, 0.7]}, shown=["charts/reward_mean"]))
        >>> run.headline(), headline_text(run.headline())
        ([('charts/reward_mean', 0.6)], 'reward_mean 0.6')
        """
        return [(name, self._newest[name]) for name in self.shown_metrics if name in self._newest]

    def mean_return(self) -> float | None:
        """Mean of the last ``window`` episode returns (None before any episode ends)."""
        last = self.episode_returns[-self.window :]
        return sum(last) / len(last) if last else None

    # "Solved" must not be luck. The first episodes to finish are the short ones — on a
    # goal-reaching task the lucky ones — so they never count: the decision needs a
    # burn-in of `evidence_window` finished episodes, then that many more, and every env
    # replica to have finished its share (a fast replica cannot decide for a slow one).
    @property
    def evidence_window(self) -> int:
        """Episodes the decision averages, and the burn-in before them: ``window``, or one
        per env stepped in parallel when there are more envs than that."""
        return max(self.window, self.envs_per_step)

    def evidence(self) -> dict[str, Any]:
        """What "solved" rests on: episodes finished in this run, those averaged (the last
        ``window``), the burn-in left out, and each env replica's episodes."""
        per = {r: self.replica_episodes.get(r, 0) for r in self._env_replicas}
        if not any(per.values()):  # the returns are logged by fragments that step no envs
            per = dict(self.replica_episodes)
        window = self.evidence_window
        return {
            "episodes": len(self.episode_returns),
            "window": window,
            "burn_in": window,
            "per_replica": per,
            "min_per_replica": -(-window // max(1, len(per))),
        }

    def is_solved(self) -> bool:
        """The mean return of the last ``evidence_window`` episodes reached the target, with
        at least ``2 × evidence_window`` episodes finished in this run (the first half is
        burn-in) and every env replica having finished its share of the window."""
        if self.target_return is None or not self.episode_returns:
            return False
        ev = self.evidence()
        if ev["episodes"] < ev["burn_in"] + ev["window"]:
            return False
        if any(n < ev["min_per_replica"] for n in ev["per_replica"].values()):
            return False
        last = self.episode_returns[-ev["window"] :]
        return sum(last) / len(last) >= self.target_return

    # -- reading -----------------------------------------------------------------------
    @property
    def completed_iterations(self) -> int:
        return len(self.rows)

    @property
    def wall_time(self) -> float:
        return self.rows[-1]["time_s"] if self.rows else 0.0

    @property
    def steps_per_second(self) -> float:
        """This run's own env steps per second of its training (a resumed run's count goes
        on from the checkpoint's, which this run's time did not take: ``charts/SPS`` too)."""
        return (self.env_steps - self.env_steps_base) / self.wall_time if self.wall_time else 0.0

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
        # one window in one line: with a target, the one "solved" is decided on
        ev = (self.solved_at.get("evidence") if self.solved_at else None) or self.evidence()
        window = ev["window"] if self.target_return is not None else self.window
        last = self.episode_returns[-window:]
        mean_text = f"{sum(last) / len(last):.1f}" if last else "n/a"
        unfinished = (
            f" ({self.unfinished_env_steps:,} of them in iterations the stop left unfinished)"
            if self.unfinished_env_steps
            else ""
        )
        headline = headline_text(self.headline())
        text = (
            f"{self.status}: {self.completed_iterations}/{self.iterations} iterations under "
            f"{self.policy_name}, {self.env_steps:,} {self.unit}{unfinished}"
            f"{f' ({self.env_steps_base:,} of them before it resumed)' if self.env_steps_base else ''} "
            f"in {self.wall_time:.1f} s "
            f"({self.steps_per_second:,.0f} {rate_label(self.unit)}); "
        )
        # a run without episodes (GRPO) says what it logged for the progress bar instead
        text += (
            headline
            if headline and not last
            else f"mean return of the last {window} episodes {mean_text}" + (f"; {headline}" if headline else "")
        )
        if self.solved_at:
            text += (
                f"; solved (≥ {self.target_return:g}) at iteration {self.solved_at['iteration']}"
                f" after {self.solved_at['time_s']:.2f} s, {self.solved_at['env_steps']:,} {self.unit}"
                f", with {ev['episodes']} episodes finished by "
                f"{len(ev['per_replica'])} env replica{'s' if len(ev['per_replica']) != 1 else ''}"
                f" (the first {ev['burn_in']} not counted)"
            )
        elif self.target_return is not None:
            ev = self.evidence()
            text += (
                f"; not solved (target {self.target_return:g}; {ev['episodes']} episodes finished, "
                f"the decision needs ≥ {ev['burn_in'] + ev['window']} and ≥ {ev['min_per_replica']}"
                " from each env replica)"
            )
        return text

    def __repr__(self) -> str:
        return f"<Run {self.summary()}>"

    def _repr_html_(self) -> str:
        return f"<div style='font-family:monospace'><b>workbench run</b> — {html.escape(self.summary())}</div>"


def merge_shown(shown: list[str], names) -> list[str]:
    """``shown`` with the prog_bar metric ``names`` it lacks added: ``charts/`` ones first
    (the learning curve, CleanRL's namespace), each kind in the order first logged, so the
    order is the same whichever replica's report came first.

    >>> merge_shown(["perf/tokens_per_s"], ["charts/reward", "perf/tokens_per_s", "charts/accuracy"])
    ['charts/reward', 'charts/accuracy', 'perf/tokens_per_s']
    """
    added = [name for name in dict.fromkeys(names) if name not in shown]
    return sorted(shown + added, key=lambda name: not name.startswith("charts/")) if added else shown


def headline_text(pairs: list[tuple[str, float]]) -> str:
    """``Run.headline()`` as the progress bar shows it: each name's last part (the whole
    name where two share it) and its value to 3 significant digits, thousands grouped.

    >>> headline_text([("charts/heldout_accuracy", 0.72366), ("perf/generate_tokens_per_s", 24103.7)])
    'heldout_accuracy 0.724 · generate_tokens_per_s 24,104'
    >>> headline_text([("charts/loss", 1.5), ("losses/loss", 2e-05)])
    'charts/loss 1.5 · losses/loss 2e-05'
    """
    short = [name.rsplit("/", 1)[-1] for name, _ in pairs]
    return " · ".join(
        f"{label if short.count(label) == 1 else name} {_number(value)}" for (name, value), label in zip(pairs, short)
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
