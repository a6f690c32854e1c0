"""The notebook's side of a run on namespace hosts: run inside the scheduler's host by
``tests/hosts`` (``ip netns exec HOST python drive_run.py SPEC``), it connects to the
scheduler, runs an FDG under ``policy`` (SingleLearnerCoarse unless said), injects one
fault after iteration ``at`` (``kill``: SIGKILL a worker; ``stop``: SIGSTOP it; ``cut``:
take its host's link down; ``blink``: the same, plugged back in once the run has gone on
without it; ``pause``: SIGSTOP it for ``pause_s`` then SIGCONT, a hiccup
shorter than the liveness probe's limit; ``throttle``: make its host's link slow, to
``rate``) and prints one JSON line with what happened."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(spec: dict) -> dict:
    from distributed import Client

    from tests.conftest import toy_fdg
    from tests.hosts.netns import throttle
    from workbench.cluster._dask_compat import workers_info

    client = Client(spec["scheduler"], timeout=120, set_as_default=False)
    client.wait_for_workers(spec["workers"], timeout=180)
    pids = client.run(os.getpid)
    policy = spec.get("policy", "coarse")
    if spec.get("fdg") == "five kinds":
        fdg = five_kinds_fdg()
        policy = alone_on_w2(spec["target"])
    else:
        fdg = toy_fdg(time=time)
        # the counters' env step, taking some time (iterations of some length)
        fdg.add_fragment(
            "env",
            "time.sleep(0.01)\nobs = obs + 1\nreward = action.copy()\nseen += 1\n"
            "wb.log('charts/episodic_return', float(reward.sum()))",
            rate="step",
        )
    fault: dict = {}

    class Inject:
        def log(self, row: dict) -> None:
            if (
                spec["fault"] == "blink"
                and fault
                and "restored" not in fault
                and any(e.kind == "worker lost" for e in fdg.last_run.events)
            ):
                # the run has moved on without the host: plug its cable back in
                subprocess.run(
                    ["ip", "netns", "exec", spec["switch"], "ip", "link", "set", f"port{fault['host']}", "up"],
                    check=True,
                    timeout=10,
                )
                fault["restored"] = row["iteration"]
            if row["iteration"] != spec.get("at") or fault:
                return
            run = fdg.last_run
            learner_home = run.policy.group_of("learner").workers[0]
            info = workers_info(client)
            names = {str(w["name"]): a for a, w in info.items()}
            if spec["target"] == "other":
                name = next(n for n in sorted(names) if n != learner_home)
            else:  # the worker holding that fragment
                name = run.policy.group_of(spec["target"]).workers[0]
            address = names[name]
            fault.update(
                worker=name,
                address=address,
                at=time.time(),
                placement={g.name: list(g.workers) for g in run.policy.groups},
            )
            if spec["fault"] == "kill":
                os.kill(pids[address], signal.SIGKILL)
            elif spec["fault"] == "stop":
                os.kill(pids[address], signal.SIGSTOP)
                fault["pid"] = pids[address]
            elif spec["fault"] == "pause":
                os.kill(pids[address], signal.SIGSTOP)
                threading.Timer(spec["pause_s"], os.kill, (pids[address], signal.SIGCONT)).start()
            elif spec["fault"] in ("cut", "blink", "throttle"):
                host = fault["host"] = spec["hosts"].index(address.split("://")[1].rsplit(":", 1)[0])
                if spec["fault"] in ("cut", "blink"):
                    subprocess.run(
                        ["ip", "netns", "exec", spec["switch"], "ip", "link", "set", f"port{host}", "down"],
                        check=True,
                        timeout=10,
                    )
                else:
                    throttle(spec["switch"], spec["names"][host], host, spec["rate"])

        def close(self) -> None:
            pass

    loggers: list = [Inject()]
    if spec.get("log_dir"):  # the fault line goes to the metric loggers too
        from workbench.profiling import CSVLogger, TensorBoardLogger, tensorboard_available

        loggers.append(CSVLogger(os.path.join(spec["log_dir"], "metrics.csv")))
        if tensorboard_available():
            loggers.append(TensorBoardLogger(os.path.join(spec["log_dir"], "tb")))
    topics_before = set(client.run_on_scheduler(_workbench_topics))
    options = {"lost_after": spec["lost_after"]} if "lost_after" in spec else {}
    run = fdg.run(
        iterations=spec["iterations"],
        steps=4,
        policy=policy,
        cluster=client,
        progress=False,
        loggers=loggers,
        **options,
    )
    lost = [e for e in run.events if e.kind == "worker lost"]
    result = {
        "status": run.status,
        "completed": run.completed_iterations,
        "wall_s": run.wall_time,
        "iterations": [r["iteration"] for r in run.rows],
        "lost_iterations": run.lost_iterations,
        "events": [e.message for e in lost],
        "fault": fault,
        "detected_after": lost[0].time - fault["at"] if lost and fault else None,
        "workers_after": sorted(workers_info(client)),
        "placed_on": sorted({w for g in run.policy.groups for w in g.workers}),
        "scale": run.state.fragments["learner"][0]["scale"] if run.state is not None else None,
        "total": run.state.fragments["learner"][0].get("total") if run.state is not None else None,
        "silent_seconds": [
            float(m.group(1)) for e in lost if (m := re.search(r"not heard from for ([\d.]+) s", e.message))
        ],
    }
    if spec.get("log_dir"):
        result["report"] = run.report(os.path.join(spec["log_dir"], "report.html"))
        # what the dashboard page reads: run events on the scheduler topics of this run's stretches
        result["dashboard_events"] = client.run_on_scheduler(_run_events, sorted(topics_before))
        result["placement_before_fault"] = fault.get("placement")
    if "pid" in fault:
        try:  # thaw it, if its nanny has not killed it: it finds itself removed and closes
            os.kill(fault["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    client.close()
    return result


KINDS = ("learner", "actor", "env", "buffer", "reward")


def five_kinds_fdg():
    """A torch-free loop with a fragment of each kind a run may place on its own worker:
    envs count up and report a raw signal, a reward fragment turns it into rewards, a buffer
    keeps them, the learner sums the buffer's iteration and halves the actors' gain."""
    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"np": np, "wb": wb, "time": time})
    fdg.add_fragment("env", "obs = np.arange(3.0) + 10 * replica.index", rate="init")
    fdg.add_fragment("learner", "scale = 1.0\ntotal = 0.0", rate="init")
    fdg.add_fragment("actor", "gain = scale", rate="init")
    fdg.add_fragment("buffer", "kept = 0", rate="init")
    fdg.add_fragment("actor", "action = obs * gain", rate="step")
    fdg.add_fragment(
        "env",
        "time.sleep(0.01)\nobs = obs + 1\nsignal = action.copy()\n"
        "wb.log('charts/episodic_return', float(signal.sum()))",
        rate="step",
    )
    fdg.add_fragment("reward", "reward = signal * 2.0", rate="step")
    fdg.add_fragment("buffer", "stored = reward + 0.0\nkept += 1", rate="step")
    fdg.add_fragment(
        "learner", "total += float(stored.sum())\nwb.log('learner/total', total)\nscale = scale * 0.5", rate="iteration"
    )
    fdg.add_fragment("actor", "gain = scale", rate="iteration")
    return fdg


def alone_on_w2(kind: str):
    """One group per kind: ``kind``'s alone on worker w2, every other on w1, so a fault of
    w2 hits that kind's worker and nothing else."""
    from workbench.fdg.policy import Group, Policy

    return Policy(f"{kind} on w2", tuple(Group((k,), 1, ("w2" if k == kind else "w1",)) for k in KINDS))


def _workbench_topics(dask_scheduler=None) -> list[str]:
    from workbench.cluster._dask_compat import workbench_topic_names

    return list(workbench_topic_names(dask_scheduler))


def _run_events(skip: list[str], dask_scheduler=None) -> list[dict]:
    """The run events (a lost worker's line) on the workbench topics not in ``skip``."""
    from workbench.cluster.dashboard_model import RunState

    said = []
    for topic in _workbench_topics(dask_scheduler):
        if topic not in skip:
            state = RunState(topic)
            state.absorb(dask_scheduler.get_events(topic))
            said += [{"kind": k, "message": m, "iteration": i} for k, m, i in state.run_events]
    return said


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
