"""Play a run's final state without learning, in this process: the fragments that step
(actor, env) run their step cells on a copy of the state; a fragment that only learns
(no step cell) never runs, its kept values (the newest weights) are read as they are.

Per stepping fragment, from the state's first replica:

- a fragment whose state holds an environment runs its init cell again, under
  ``wb.evaluating()``: ``wb.envs.make`` then gives held-out seeds (and, for ``show``,
  envs that render); every other value it kept (an observation normaliser's statistics)
  is laid over what the init cell built, except the names its step cell writes;
- any other stepping fragment (an actor) continues from its kept values, and its
  iteration cell runs once first when it reads only what learners keep (it syncs the
  newest weights; one that learns from the rollout, A3C's gradients, does not run).

The state is deep-copied first and the random generators (``random``, NumPy's, torch's)
are restored afterwards, so an evaluation changes nothing, whatever it raises.

A run loaded from the run store keeps its state as a checkpoint file encodes it (tensors and
plain values, :mod:`workbench.runtime.state.portable`): each such fragment first runs its init
cell, with the notebook names the run was loaded with (``wb.load_run(…, namespace=globals())``),
and the saved values are laid over what it built, as a resume does; then it plays as above.
"""

from __future__ import annotations

import copy
import dataclasses
import linecache
import os
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench import context
from workbench.context import Evaluating, ReplicaContext, ReplicaInfo, activate, deactivate
from workbench.evaluation.episodes import EpisodeRecorder, chosen_episodes, is_env
from workbench.evaluation.errors import EvaluationError
from workbench.evaluation.results import EvaluationResult
from workbench.evaluation.video import Video

__all__ = ["evaluate", "show", "play", "Played", "DEFAULT_MAX_STEPS"]

#: steps (of every env at once) an evaluation may take before it gives up
DEFAULT_MAX_STEPS = 100_000
#: names the runtime keeps in a fragment's state for itself (env-step counters, random streams)
_RESERVED_PREFIX = "_wb_"
#: the runtime's mark on a state that left out what does not pickle (workbench.runtime.state.counting)
_REBUILT = "_wb_rebuilt"

NO_STATE = (
    "this run kept no state to evaluate (it ran with keep_state=False, or failed before its "
    "first iteration). Run again with keep_state=True (the default), or resume a checkpoint "
    "(fdg.run(resume=DIR, iterations=1)) and evaluate that run."
)


def evaluate(
    run, episodes: int = 10, *, seed: int | None = None, max_steps: int = DEFAULT_MAX_STEPS
) -> EvaluationResult:
    """Play ``run``'s final state for ``episodes`` episodes without learning (see the module);
    ``seed``: the env seed to use instead of the held-out ones (training's seed + 1,000,000)."""
    return play(run, episodes, seed=seed, max_steps=max_steps).result


def show(
    run, episodes: int = 1, *, seed: int | None = None, fps: float = 50, max_steps: int = DEFAULT_MAX_STEPS
) -> Video:
    """``episodes`` episodes of ``run``'s final state, played as `evaluate` does by the first
    env, as a `Video` (an mp4 shown inline in a notebook)."""
    played = play(run, episodes, seed=seed, max_steps=max_steps, render=True)
    return Video.from_frames(played.frames, fps=fps, result=played.result)


@dataclass(frozen=True)
class Played:
    """What `play` gives: the result, and the frames when it rendered."""

    result: EvaluationResult
    frames: list[np.ndarray] | None


def play(
    run,
    episodes: int,
    *,
    seed: int | None = None,
    render: bool = False,
    max_steps: int = DEFAULT_MAX_STEPS,
    state: Any = None,
    max_frames: int | None = None,
) -> Played:
    """Play the state (``state``, else ``run.state``) of ``run``'s FDG; see the module.
    ``max_frames``: rendering stops after this many frames (the episodes still end)."""
    _check_count("episodes", episodes)
    _check_count("max_steps", max_steps)
    if max_frames is not None:
        _check_count("max_frames", max_frames)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise EvaluationError(f"seed must be a whole number ≥ 0 or None (held-out seeds), got {seed!r}.")
    if run.status == "running":
        raise EvaluationError(
            "this run is still training: stop it (%fdg stop, fdg.stop()) or let it end, then evaluate its final state."
        )
    state = state if state is not None else run.state
    if state is None or run.fdg is None or not state.fragments:
        raise EvaluationError(NO_STATE)
    if render and not os.environ.get("DISPLAY"):  # no screen: draw offscreen
        os.environ.setdefault("MUJOCO_GL", "egl")  # MuJoCo through EGL (GLFW needs a display)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (CartPole) without probing for one
    started = time.perf_counter()
    evaluation = Evaluating(seed=None if seed is None else int(seed), render=render)
    with _own_random(seed if seed is not None else Evaluating.HELD_OUT), _one_thread(), _evaluating(evaluation):
        game = _Game(run.fdg, state, run)
        try:
            game.start()
            result = game.play(episodes, evaluation, max_steps, render, max_frames)
        finally:
            game.close()
    return Played(dataclasses.replace(result, seconds=time.perf_counter() - started), game.frames)


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise EvaluationError(f"{name} must be a whole number ≥ 1, got {value!r}.")


@contextmanager
def _evaluating(evaluation: Evaluating):
    token = context.evaluation.set(evaluation)
    try:
        yield
    finally:
        context.evaluation.reset(token)


@contextmanager
def _one_thread():
    """torch on one thread while the cells play (as an inline run's): a few rows an act,
    where a second thread only spins against the envs; the caller's count comes back."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch is not None:
            torch.set_num_threads(threads)


@contextmanager
def _own_random(seed: int):
    """Seed ``random``, NumPy's and torch's global generators for the evaluation and give
    the caller's states back afterwards."""
    torch = sys.modules.get("torch")
    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state() if torch is not None else None)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if torch is not None:
        torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        if torch is not None:
            torch.set_rng_state(saved[2])


class _Game:
    """The stepping fragments' namespaces, cells and envs for one evaluation."""

    def __init__(self, fdg, state, run) -> None:
        self.fdg, self.state = fdg, state
        self.fragments = fdg.fragments
        schedule = fdg.schedule()
        self.stepping = list(schedule.step_order)
        if not self.stepping:
            raise EvaluationError(
                "this FDG has no step cells, so nothing plays episodes: an evaluation runs the "
                "fragments that step (an actor and an env fragment); add them, train, then evaluate."
            )
        #: every fragment's init order (a loaded run's encoded state is decoded in it)
        self.every_init = list(schedule.init_order)
        self.init_order = [f for f in self.every_init if f in self.stepping]
        self.iteration_order = [f for f in schedule.iteration_order if f in self.stepping]
        self.writers = fdg.writers()
        firsts = {
            f: replicas[0] for f, replicas in state.fragments.items() if replicas and isinstance(replicas[0], dict)
        }
        #: fragments whose state a checkpoint file encodes (a run loaded from the store): decoded by start
        self.encoded = {f: values for f, values in firsts.items() if run.is_checkpoint_values(values)}
        self.restore = run.restore_checkpoint_values
        if self.encoded and fdg.namespace is None and fdg.notebook_names():
            names = ", ".join(sorted(fdg.notebook_names())[:6])
            raise EvaluationError(
                f"this run was loaded without the notebook names its cells read ({names}, …), and its "
                "checkpoint keeps tensors and plain values, not the objects a cell builds from them: load "
                "it in the notebook that defines them, wb.load_run(…, namespace=globals()), then evaluate."
            )
        self.kept = {
            f: {n: v for n, v in values.items() if not n.startswith(_RESERVED_PREFIX)} for f, values in firsts.items()
        }
        #: fragments whose kept state left out what does not pickle (an EnvPool env): rebuilt by their init
        self.rebuilt = {f for f, values in firsts.items() if values.get(_REBUILT)}
        self.memo: dict[int, Any] = {}  # one deep copy: names that shared an object still do
        self.copies: dict[tuple[str, str], Any] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.contexts: dict[str, ReplicaContext] = {}
        self.compiled: dict[tuple[str, str], Any] = {}
        self.recorders: list[EpisodeRecorder] = []
        #: envs the decoding of a checkpoint's state built (the envs played are built afresh)
        self.spare_envs: list[Any] = []
        self.frames: list[np.ndarray] | None = None
        self.iteration = state.iteration
        trained = state.env_steps
        for frag in self.stepping:
            ctx = ReplicaContext(ReplicaInfo(frag))
            ctx.iteration = self.iteration
            ctx.env_steps = lambda: trained  # schedules (ε) see the trained count: evaluation takes none of it
            self.contexts[frag] = ctx

    # -- building the namespaces -------------------------------------------------------------
    def start(self) -> None:
        notebook = dict(self.fdg.namespace or {})
        order = self.every_init
        for frag in [f for f in order if f in self.encoded] + [f for f in self.encoded if f not in order]:
            self.kept[frag] = self._decoded(frag, notebook)
            del self.encoded[frag]  # its values are objects now: what later init cells read
        for frag in self.init_order + [f for f in self.stepping if f not in self.init_order]:
            own = self.kept.get(frag, {})
            ns = dict(notebook)
            ns["replica"] = ReplicaInfo(frag)
            self.namespaces[frag] = ns
            fresh = not own or frag in self.rebuilt or any(is_env(v) for v in own.values())
            if fresh:
                if "init" in self.fragments[frag].cells:
                    self._run(frag, "init")
                step_writes = set(self.fragments[frag].writes_at("step"))
                ns.update({n: self._copy(frag, n, v) for n, v in own.items() if n not in step_writes and not is_env(v)})
            else:
                ns.update({n: self._copy(frag, n, v) for n, v in own.items() if not is_env(v)})
        first = 0
        for frag in self.stepping:
            ns = self.namespaces[frag]
            wrapped: dict[int, EpisodeRecorder] = {}
            for name, value in list(ns.items()):
                if name == "replica" or name in notebook and notebook[name] is value or not is_env(value):
                    continue
                if id(value) not in wrapped:
                    wrapped[id(value)] = EpisodeRecorder(value, first)
                    first += wrapped[id(value)].num_envs
                    self.recorders.append(wrapped[id(value)])
                ns[name] = wrapped[id(value)]
        if not self.recorders:
            names = ", ".join(self.stepping)
            raise EvaluationError(
                f"this FDG has no env fragment: no init cell of its stepping fragments ({names}) builds an "
                "environment (an object with reset, step and close, as wb.envs.make gives), so there are no "
                "episodes to count. Build the env in a fragment's init cell (envs = wb.envs.make(…))."
            )
        for frag in self.iteration_order:
            if "iteration" in self.fragments[frag].cells and self._reads_only_kept(frag, "iteration"):
                self._run(frag, "iteration")

    def _decoded(self, frag: str, notebook: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's values of ``frag`` as objects: its init cell builds them, the saved
        values are laid over them (what a resume does)."""
        saved = self.encoded[frag]
        ns = dict(notebook)
        ns["replica"] = ReplicaInfo(frag)
        for name in self.fragments[frag].external_inputs("init"):  # decoded before it: init order
            for producer in self.writers.get(name, ()):
                if producer != frag and producer not in self.encoded and name in self.kept.get(producer, {}):
                    ns[name] = self.kept[producer][name]
        if "init" in self.fragments[frag].cells:
            evaluation = context.evaluation.get()
            taken = len(evaluation.seeds) if evaluation is not None else 0
            self._exec(frag, "init", ns, ReplicaContext(ReplicaInfo(frag)))
            # the envs it builds here are rebuilt to play: their seeds are not the played ones
            if evaluation is not None:
                del evaluation.seeds[taken:]
        # an env's saved state is not laid over: the envs played are built afresh (held-out seeds, rendering)
        restorable = {name: enc for name, enc in saved.items() if not is_env(ns.get(name))}
        try:
            self.restore(ns, restorable)
        except ValueError as exc:
            raise EvaluationError(
                f"the run's saved state of fragment {frag!r} does not fit what its init cell builds now: {exc}"
            ) from exc
        values = {name: ns[name] for name in saved if name in ns and not name.startswith(_RESERVED_PREFIX)}
        shared = {id(v) for v in notebook.values()}
        self.spare_envs += [v for v in ns.values() if is_env(v) and id(v) not in shared]
        return values

    def _reads_only_kept(self, frag: str, rate: str) -> bool:
        """The cell reads nothing another stepping fragment writes (no rollout to learn from)."""
        return not any(
            p != frag and p in self.namespaces
            for name in self.fragments[frag].external_inputs(rate)
            for p in self.writers.get(name, ())
        )

    def _copy(self, frag: str, name: str, value: Any) -> Any:
        key = (frag, name)
        if key not in self.copies:
            try:
                self.copies[key] = copy.deepcopy(value, self.memo)
            except Exception as exc:
                raise EvaluationError(
                    f"could not copy {name!r} of fragment {frag!r} ({type(value).__name__}: {exc}) to evaluate "
                    "the run's state without changing it. Keep such objects (locks, open files, "
                    "processes) out of the names a fragment keeps, or rebuild them in its init cell."
                ) from exc
        return self.copies[key]

    def _bind(self, frag: str, rate: str) -> None:
        ns = self.namespaces[frag]
        for name in self.fragments[frag].external_inputs(rate):
            for producer in self.writers.get(name, ()):
                if producer == frag:
                    continue
                if producer in self.namespaces:
                    if name in self.namespaces[producer]:
                        ns[name] = self.namespaces[producer][name]
                elif name in self.kept.get(producer, {}):
                    ns[name] = self._copy(producer, name, self.kept[producer][name])

    def _run(self, frag: str, rate: str) -> None:
        self._bind(frag, rate)
        self._exec(frag, rate, self.namespaces[frag], self.contexts[frag])

    def _exec(self, frag: str, rate: str, namespace: dict[str, Any], ctx: ReplicaContext) -> None:
        key = (frag, rate)
        if key not in self.compiled:
            source = self.fragments[frag].cells[rate].code
            filename = f"<fragment {frag}:{rate}>"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            self.compiled[key] = compile(source, filename, "exec")
        token = activate(ctx)
        try:
            exec(self.compiled[key], namespace)
        except Exception as exc:
            raise _cell_error(frag, rate, exc) from exc
        finally:
            deactivate(token)

    # -- playing ------------------------------------------------------------------------------
    def play(
        self, episodes: int, evaluation: Evaluating, max_steps: int, render: bool, max_frames: int | None = None
    ) -> EvaluationResult:
        total = sum(r.num_envs for r in self.recorders)
        chosen = chosen_episodes(episodes, total, only_env=0 if render else None)
        first = self.recorders[0]
        if render:
            self.frames = first.frames = [self._first_frame(first)]

        def finished() -> bool:
            return all(
                len(r.ended.get(env, ())) >= n
                for env, n in chosen.items()
                for r in self.recorders
                if r.first_env <= env < r.first_env + r.num_envs
            )

        step = 0
        while not finished():
            if step >= max_steps:
                done = sum(min(len(r.ended.get(env, ())), n) for env, n in chosen.items() for r in self.recorders)
                raise EvaluationError(
                    f"the evaluation took {max_steps:,} steps and {done} of the {episodes} episodes it counts "
                    "ended: the env's episodes do not end (no time limit?). Give the env a time limit, or "
                    "pass a larger max_steps."
                )
            for frag in self.stepping:
                self.contexts[frag].step = step
                self._run(frag, "step")
            step += 1
            if render and (
                len(first.ended.get(0, ())) >= episodes or max_frames is not None and len(self.frames) >= max_frames
            ):
                first.frames = None  # the episodes shown have ended, or the clip is long enough: no more frames
        ended = {env: eps for r in self.recorders for env, eps in r.ended.items()}
        rounds = max(chosen.values())
        picked = [(env, ended[env][k]) for k in range(rounds) for env in sorted(chosen) if k < chosen[env]]
        seeds = tuple(used for _, used in evaluation.seeds)
        return EvaluationResult(
            returns=tuple(ret for _, (ret, _) in picked),
            lengths=tuple(n for _, (_, n) in picked),
            envs=tuple(env for env, _ in picked),
            seeds=seeds,
            cell_seeds=tuple(asked for asked, _ in evaluation.seeds),
            held_out=evaluation.seed is None and bool(seeds),
            greedy=evaluation.asked,
            iteration=self.iteration,
            env_steps=sum(r.steps for r in self.recorders),
        )

    def _first_frame(self, recorder: EpisodeRecorder) -> np.ndarray:
        render = getattr(recorder.env, "render", None)
        frame = None
        try:
            frame = render(0) if callable(render) else None
        except Exception as exc:
            raise EvaluationError(_CANNOT_RENDER.format(env=type(recorder.env).__name__, why=f" ({exc})")) from exc
        frame = np.asarray(frame) if frame is not None else None
        if frame is None or frame.ndim != 3 or frame.shape[-1] not in (3, 4):
            raise EvaluationError(_CANNOT_RENDER.format(env=type(recorder.env).__name__, why=""))
        return frame.astype(np.uint8)

    def close(self) -> None:
        for env in [r.env for r in self.recorders] + self.spare_envs:
            try:
                env.close()
            except Exception:  # closing is best effort; the result is made
                pass


_CANNOT_RENDER = (
    'the env ({env}) cannot render frames{why}. run.show() needs envs that draw: wb.envs.make("ID") with a '
    "gymnasium id renders while show() records (CartPole-v1 through gymnasium's CartPole, which needs "
    "pygame: pip install 'workbench-rl[video]'); an env of your own needs render(index) returning an "
    "[H, W, 3] uint8 array, its gymnasium envs made with render_mode=wb.render_mode(). run.evaluate() "
    "needs no frames."
)


def _cell_error(frag: str, rate: str, exc: BaseException) -> EvaluationError:
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == f"<fragment {frag}:{rate}>":
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f"at cell line {line}" if line else "in its cell"
    return EvaluationError(
        f"fragment {frag!r} ({rate} cell) raised during evaluation {where}: {type(exc).__name__}: {exc}. "
        "The run and its state are unchanged; fix the cell (a cell may ask wb.evaluating() to act otherwise "
        "while evaluated) and evaluate again."
    )
