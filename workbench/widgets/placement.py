"""The placement board: drag fragments onto the cluster's devices; the board's state is a
:class:`~workbench.fdg.policy.Policy`.

One side lists the FDG's fragments (rates, replica count, and what each sends per
iteration under the current placement, from the plan and one measuring run); the other
shows the cluster, live from the scheduler: each worker a box with its devices (its CPU
threads, its GPUs where it has any). Dropping a fragment on a device, changing a replica
count, choosing a preset or importing JSON all go to :mod:`workbench.fdg.board`, which
returns the new policy or refuses with the reason; the board shows either. Every accepted
change is put on the FDG (``fdg.placement``), so ``%fdg run`` without ``--policy`` runs it,
and reaches a running run at its next iteration boundary (``fdg.replace``).

A board that cannot change anything says so and takes no drags: while the scheduler
does not answer (``cluster_live`` false; the workers shown as last seen), and for good once
the page's kernel restarted or died (the front end sees that; ``%fdg place`` makes a live
board).

The front end (``placement.js``, ``placement.css`` beside this file; plain DOM and HTML5
drag and drop, nothing fetched) only draws the traits and sends what the user did as
messages: ``{"type": "drop", "fragment", "worker", "device"}``, ``{"type": "replicas",
"fragment", "count"}``, ``{"type": "preset", "name"}``, ``{"type": "import", "text"}``.

Example (in a notebook):
    >>> board = wb.placement(fdg)                     # doctest: +SKIP
    >>> board                                         # doctest: +SKIP
    >>> board.policy                                  # doctest: +SKIP
    Policy('custom', actor+env ×2 on 0, 1 | learner ×1 on 1)
    >>> open("mine.json", "w").write(board.to_json())  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from pathlib import Path

import anywidget
import traitlets

from workbench.fdg import board as logic
from workbench.errors import PlacementError, RunConfigError
from workbench.fdg.vocabulary import TIMINGS
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import human_bytes
from workbench.fdg.plan import make_plan
from workbench.fdg.policy import Policy

__all__ = ["PlacementBoard", "placement"]

#: how often the board asks the scheduler which workers are there
POLL_SECONDS = 1.0
#: what the preset buttons say
PRESET_LABELS = {
    "coarse": "Coarse",
    "fine": "Fine",
    "multilearner": "MultiLearner",
    "gpuonly": "GPUOnly",
    "async": "Async",
    "pipelined": "Pipelined",
    "auto": "auto",
}
_HERE = Path(__file__).resolve().parent


class PlacementBoard(anywidget.AnyWidget):
    """A board placing ``fdg``'s fragments on ``cluster``'s workers (see the module doc).

    ``cluster``: a ``distributed.Client``, a scheduler address, or None (the notebook's
    client, else the embedded local cluster). ``steps``: the steps per iteration the
    traffic is shown for (default: the last run's, else 128). The board starts from
    ``fdg.placement`` when that still fits the cluster, else from the coarse preset.

    Example:
        >>> board = PlacementBoard(fdg, client)                       # doctest: +SKIP
        >>> board.handle({"type": "drop", "fragment": "learner", "worker": "1", "device": "cpu"})  # doctest: +SKIP
        >>> board.policy.group_of("learner").workers                  # doctest: +SKIP
        ('1',)
        >>> board.message["text"]                                     # doctest: +SKIP
        'learner → 1 (cpu)'
    """

    _esm = _HERE / "placement.js"
    _css = _HERE / "placement.css"

    #: the cluster: [{name, address, nthreads, gpus, memory, left}] (left: a worker the
    #: policy still uses that is gone)
    workers = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: [{name, rates, group, replicas, device, workers, color, sends: [...], sends_text}]
    fragments = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: [{name, fragments, replicas, workers, device, color}]
    groups = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: the policy as JSON (read it; change the board through the policy or the messages)
    policy_json = traitlets.Unicode("").tag(sync=True)
    policy_name = traitlets.Unicode("").tag(sync=True)
    asynchronous = traitlets.Bool(False).tag(sync=True)
    #: iterations the actors read the learner's values late (Policy.lag; 0: in step)
    lag = traitlets.Int(0).tag(sync=True)
    #: steps per iteration the traffic is shown for; the front end may change it
    steps = traitlets.Int(128).tag(sync=True)
    #: bytes crossing processes per iteration, human-readable ("" when not measured)
    wire = traitlets.Unicode("").tag(sync=True)
    #: why traffic is not shown, when the sizes could not be measured
    sizes_note = traitlets.Unicode("").tag(sync=True)
    #: the last outcome: {"level": "ok" | "error" | "info", "text": …, "serial": n}
    message = traitlets.Dict().tag(sync=True)
    #: whether a run is going, and what a change does then (or that the cluster does not answer)
    status = traitlets.Unicode("").tag(sync=True)
    #: the scheduler answered the last poll: while it does not, the board takes no drags
    cluster_live = traitlets.Bool(True).tag(sync=True)
    running = traitlets.Bool(False).tag(sync=True)
    presets = traitlets.List(traitlets.List()).tag(sync=True)

    def __init__(self, fdg, cluster=None, *, steps: int | None = None) -> None:
        from workbench.cluster.connect import connect, inventory_of
        from workbench.config import DEFAULT_STEPS

        last = getattr(fdg, "last_run", None)
        super().__init__(
            steps=steps or (last.steps if last is not None else DEFAULT_STEPS),
            presets=[[key, PRESET_LABELS[key]] for key in logic.BOARD_PRESETS],
        )
        self.fdg = fdg
        fdg.placement_steps = self.steps
        self._inventory_of = inventory_of
        self._cluster = connect(cluster, quiet=True)
        self._client = self._cluster.client
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._serial = 0
        self._inventory: Inventory = inventory_of(self._client)
        self._policy: Policy | None = None
        self._sizes, note = _measure(fdg)
        self.sizes_note = note
        self._policy = self._first_policy()
        if self._policy is not None:
            fdg.placement = self._policy
        self._show()
        self.on_msg(self._on_msg)
        self.observe(self._on_steps, names="steps")
        self._poller = threading.Thread(target=self._poll, name="workbench-placement-board", daemon=True)
        self._poller.start()

    # -- the policy ----------------------------------------------------------------------
    @property
    def policy(self) -> Policy | None:
        """The board's placement (None only while no preset fits the cluster, e.g. no workers)."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise PlacementError(f"board.policy must be a workbench Policy, not {type(policy).__name__}.")
        self._change(
            lambda inv: logic.load_policy(policy.to_json(), self.fdg, inv),
            f"policy {policy.name!r} set",
            raise_refusal=True,
        )

    def to_json(self) -> str:
        """The board's policy as JSON (``Policy.from_json``, ``--policy FILE.json`` read it)."""
        return self.policy_json

    def load_json(self, text: str) -> Policy:
        """Fill the board from a policy's JSON. Malformed JSON, or a policy that does not fit
        this FDG and cluster, raises :class:`PlacementError` (also shown on the board) and
        leaves the board as it was."""
        self._change(lambda inv: logic.load_policy(text, self.fdg, inv), "imported", raise_refusal=True)
        return self._policy

    # -- what the front end sends ------------------------------------------------------
    def handle(self, content: dict) -> None:
        """Act on one message from the front end (a drop, a replica count, a preset, an
        import). The outcome is in :attr:`policy` and :attr:`message`; a refusal leaves the
        policy as it was."""
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "drop":
            fragment, worker, device = (content.get(k) for k in ("fragment", "worker", "device"))
            self._change(
                lambda inv: logic.move_fragment(self._require(), self.fdg, fragment, worker, device, inv),
                f"{fragment} → {worker} ({device})",
            )
        elif kind == "replicas":
            fragment, count = content.get("fragment"), content.get("count")
            self._change(
                lambda inv: logic.set_replicas(self._require(), self.fdg, fragment, count, inv),
                f"{fragment}: {count} replica{'' if count == 1 else 's'}",
            )
        elif kind == "preset":
            name = content.get("name")
            table = getattr(getattr(self.fdg, "last_run", None), "auto_table", None)
            label = PRESET_LABELS.get(name, name)
            if name == "auto" and table:
                best = logic.fastest_trial(table)
                label = f"auto: {best}, the fastest of the last run's auto trials"
            self._change(lambda inv: logic.fill_preset(name, self.fdg, inv, auto_table=table), f"filled from {label}")
        elif kind == "import":
            text = content.get("text")
            self._change(
                lambda inv: logic.load_policy(text if isinstance(text, str) else "", self.fdg, inv), "imported"
            )
        else:
            self._say("error", f"the board does not know the message {content!r}.")

    def _on_msg(self, _widget, content, _buffers) -> None:
        self.handle(content)

    def set_state(self, sync_data) -> None:
        """The page's change of a trait (``steps``), under the board's lock: it arrives on
        the thread that reads the page's messages while the poller may be sending the
        board's state, and ipywidgets' batching of a state (``hold_sync``) is one set per
        widget, which two threads must not fill and send at once."""
        with self._lock:
            super().set_state(sync_data)

    # -- changing ------------------------------------------------------------------------
    def _require(self) -> Policy:
        if self._policy is None:
            raise PlacementError("the board has no placement yet (no workers?): choose a preset first.")
        return self._policy

    def _change(self, edit, what: str, *, raise_refusal: bool = False) -> None:
        """Apply ``edit(inventory) -> Policy`` on the cluster as it is now; a refusal
        (PlacementError) is shown and the policy stays."""
        with self._lock:
            try:
                self._refresh_inventory()
                policy = edit(self._inventory)
                if self._is_running():
                    try:
                        self.fdg.replace(policy)
                        what += " — applies at the next iteration"
                    except RunConfigError:
                        if self._is_running():
                            raise
                        # the run ended meanwhile: the next run starts from this placement
            except (PlacementError, RunConfigError) as exc:
                self._say("error", str(exc))
                if raise_refusal:
                    raise
                return
            self._policy = policy
            self.fdg.placement = policy
            self._show()
            self._say("ok", what)

    def _say(self, level: str, text: str) -> None:
        self._serial += 1
        self.message = {"level": level, "text": text, "serial": self._serial}

    def _on_steps(self, change) -> None:
        if not isinstance(change.new, int) or change.new < 1:
            self.steps = change.old
            self._say("error", f"steps per iteration must be a whole number ≥ 1, got {change.new!r}.")
            return
        self.fdg.placement_steps = change.new
        with self._lock:
            self._show()

    # -- the cluster ---------------------------------------------------------------------
    def _refresh_inventory(self) -> bool:
        """Ask the scheduler for its workers; True when they changed."""
        inventory = self._inventory_of(self._client)
        changed = inventory != self._inventory
        self._inventory = inventory
        return changed

    def refresh(self) -> None:
        """Read the cluster's workers (and whether a run is going) now; the board also does
        this every second on its own."""
        with self._lock:
            changed = self._refresh_inventory()
            back, self.cluster_live = not self.cluster_live, True  # it answered
            if changed and self._policy is None and self._inventory.workers:
                self._policy = self._first_policy()  # the first workers joined: fill the board
                if self._policy is not None:
                    self.fdg.placement = self._policy
                    self._say("info", f"workers joined: the board starts from {self._policy.name}.")
            if changed or self.running != self._is_running() or back:
                self._show()

    def _poll(self) -> None:
        while not self._closed.wait(POLL_SECONDS):
            try:
                self.refresh()
            except Exception as exc:  # the cluster went away: say so, keep trying until closed
                if self._closed.is_set():
                    return
                if self.cluster_live:
                    with self._lock, self.hold_sync():
                        self.cluster_live = False
                        self.status = (
                            f"cluster unreachable ({type(exc).__name__}: {exc}): the workers "
                            "below are as last seen; dragging is off until it answers (retrying every second)"
                        )

    def close(self) -> None:
        """Stop following the cluster and remove the board (closing a client it opened)."""
        self._closed.set()
        if getattr(self, "_poller", None) is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=5)
        if getattr(self, "_cluster", None) is not None and self._cluster.owned and self._cluster.cluster is None:
            self._cluster.close()
        super().close()

    def _is_running(self) -> bool:
        return bool(getattr(self.fdg, "running", False))

    # -- what the front end draws ----------------------------------------------------------
    def _first_policy(self) -> Policy | None:
        current = getattr(self.fdg, "placement", None)
        if isinstance(current, Policy):
            try:
                return logic.load_policy(current.to_json(), self.fdg, self._inventory)
            except PlacementError as exc:
                self._say("info", f"the FDG's placement no longer fits ({exc}); starting from a preset.")
        for name in logic.BOARD_PRESETS[:-1]:
            try:
                return logic.fill_preset(name, self.fdg, self._inventory)
            except PlacementError:
                continue
        self._say("error", "no preset fits this cluster (no workers?); the board fills in once workers join.")
        return None

    def _show(self) -> None:
        """Set every trait the front end draws from the policy, the cluster and the plan
        (sent to the page as one update)."""
        with self.hold_sync():
            self._set_traits()

    def _set_traits(self) -> None:
        running = self._is_running()
        self.running = running
        self.status = (
            "running — changes apply at the next iteration"
            if running
            else "not running — %fdg run (without --policy) and fdg.placement use this placement"
        )
        policy, inventory = self._policy, self._inventory
        live = [
            {
                "name": w.name,
                "address": w.address,
                "nthreads": w.nthreads,
                "gpus": w.gpus,
                "memory": f"{w.memory_limit / 2**30:.1f} GiB" if w.memory_limit else "",
                "left": False,
            }
            for w in inventory.workers
        ]
        if policy is None:
            self.workers, self.groups, self.fragments = live, [], []
            self.policy_json, self.policy_name, self.wire = "", "", ""
            return
        order = list(self.fdg.fragments)
        colors = {g.name: order.index(min(g.fragments, key=order.index)) for g in policy.groups}
        gone = [w for g in policy.groups for w in dict.fromkeys(g.workers) if inventory.find(w) is None]
        self.workers = live + [
            {"name": w, "address": "", "nthreads": 0, "gpus": 0, "memory": "", "left": True}
            for w in dict.fromkeys(gone)
        ]
        self.groups = [{**g.to_dict(), "name": g.name, "color": colors[g.name]} for g in policy.groups]
        sends, total = self._traffic(policy)
        self.fragments = [self._fragment_row(name, policy, colors, sends.get(name, [])) for name in order]
        self.wire = human_bytes(total) if total is not None else ""
        self.policy_json = policy.to_json()
        self.policy_name = policy.name
        self.asynchronous = policy.asynchronous
        self.lag = policy.lag

    def _fragment_row(self, name: str, policy: Policy, colors: dict, sends: list[dict]) -> dict:
        fragment, group = self.fdg[name], policy.group_of(name)
        measured = [s["bytes"] for s in sends if s["bytes"] is not None]
        return {
            "name": name,
            "rates": list(fragment.rates),
            "group": group.name,
            "replicas": group.replicas,
            "device": group.device,
            "workers": list(group.workers),
            "color": colors[group.name],
            "sends": sends,
            "sends_text": human_bytes(sum(measured)) if measured and self._sizes is not None else "",
        }

    def _traffic(self, policy: Policy) -> tuple[dict[str, list[dict]], int | None]:
        """What each fragment sends across processes per iteration: fragment → rows."""
        plan = make_plan(self.fdg, policy)
        moved = plan.traffic(self._sizes, self.steps) if self._sizes is not None else {}
        out: dict[str, list[dict]] = {}
        for key in dict.fromkeys(r.key for r in plan.routes):
            routes = [r for r in plan.routes if r.key == key]
            edge = routes[0].interface
            size = moved.get(key) if self._sizes is not None else None
            if size is not None and edge.name not in self._sizes and any(plan._route_costs(r) for r in routes):
                size = None  # first written after the probe's iteration (a warm-up): unknown, not 0 B
            out.setdefault(edge.producer, []).append(
                {
                    "name": edge.name,
                    "to": sorted({r.interface.consumer for r in routes}),
                    "timing": " + ".join(dict.fromkeys(TIMINGS[r.interface.timing] for r in routes)),
                    "spatial": " + ".join(dict.fromkeys("as it arrives" if r.arrival else r.spatial for r in routes)),
                    "bytes": size,
                    "text": human_bytes(size)
                    if size is not None
                    else ("not measured" if self._sizes is not None else ""),
                }
            )
        return out, (sum(moved.values()) if self._sizes is not None else None)


def _measure(fdg) -> tuple[dict[str, int] | None, str]:
    """Value sizes from one short inline run, or None and why not."""
    try:
        return fdg.measure_sizes(), ""
    except Exception as exc:  # the board still places; it just cannot show bytes
        return None, f"bytes not measured: one inline step failed ({type(exc).__name__}: {exc})"


def placement(fdg, cluster=None, *, steps: int | None = None) -> PlacementBoard:
    """A placement board for ``fdg`` on ``cluster`` (see :class:`PlacementBoard`).

    Example (in a notebook; ``%fdg place`` does this for the notebook's FDG):
        >>> board = wb.placement(fdg)        # doctest: +SKIP
        >>> board                            # doctest: +SKIP
    """
    return PlacementBoard(fdg, cluster, steps=steps)
