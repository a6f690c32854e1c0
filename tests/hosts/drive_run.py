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
    fdg = toy_fdg(time=time)
    # the counters' env step, taking some time (iterations of some length)
    fdg.add_fragment("env", "time.sleep(0.01)\nobs = obs + 1\nreward = action.copy()\nseen += 1\n"
                            "wb.log('charts/episodic_return', float(reward.sum()))", rate="step")
    fault: dict = {}

    class Inject:
        def log(self, row: dict) -> None:
            if spec["fault"] == "blink" and fault and "restored" not in fault and any(
                    e.kind == "worker lost" for e in fdg.last_run.events):
                # the run has moved on without the host: plug its cable back in
                subprocess.run(["ip", "netns", "exec", spec["switch"], "ip", "link", "set",
                                f"port{fault['host']}", "up"], check=True, timeout=10)
                fault["restored"] = row["iteration"]
            if row["iteration"] != spec.get("at") or fault:
                return
            run = fdg.last_run
            learner_home = run.policy.group_of("learner").workers[0]
            info = workers_info(client)
            names = {str(w["name"]): a for a, w in info.items()}
            name = learner_home if spec["target"] == "learner" else next(n for n in sorted(names) if n != learner_home)
            address = names[name]
            fault.update(worker=name, address=address, at=time.time(),
                         placement={g.name: list(g.workers) for g in run.policy.groups})
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
                    subprocess.run(["ip", "netns", "exec", spec["switch"], "ip", "link", "set", f"port{host}",
                                    "down"], check=True, timeout=10)
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
    run = fdg.run(iterations=spec["iterations"], steps=4, policy=spec.get("policy", "coarse"), cluster=client,
                  progress=False, loggers=loggers)
    lost = [e for e in run.events if e.kind == "worker lost"]
    result = {
        "status": run.status, "completed": run.completed_iterations, "wall_s": run.wall_time,
        "iterations": [r["iteration"] for r in run.rows], "lost_iterations": run.lost_iterations,
        "events": [e.message for e in lost], "fault": fault,
        "detected_after": lost[0].time - fault["at"] if lost and fault else None,
        "workers_after": sorted(workers_info(client)),
        "placed_on": sorted({w for g in run.policy.groups for w in g.workers}),
        "scale": run.state.fragments["learner"][0]["scale"] if run.state is not None else None,
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
