"""A lost worker shows: on namespace hosts, a worker host's link goes down after the run's
first iterations (not during deploy), and the run says so in ONE line — which worker, what
happened to it, which fragments were re-placed where, how many finished iterations ran
again — printed, in the CSV's events file and TensorBoard, on the dashboard's topic, and in
the run report; the run still finishes every iteration."""

from __future__ import annotations

import csv
import glob
import os
import re

ITERATIONS = 12
AT = 4


def test_a_cut_off_host_is_said_once_everywhere_with_where_its_fragments_went(host_cluster, tmp_path):
    log_dir = tmp_path / "logs"
    result = host_cluster.drive(fault="cut", target="learner", at=AT, iterations=ITERATIONS, log_dir=str(log_dir))
    fault, worker = result["fault"], result["fault"]["worker"]
    assert result["rc"] == 0 and result["status"] == "finished", result
    assert result["iterations"] == list(range(ITERATIONS)), result  # every iteration, once, in order
    # the learner's host went after its first iterations: the cut happened while it trained
    assert fault["placement"]["learner"] == [worker], fault

    printed = [line for line in result["stdout"].splitlines() if line.startswith("workbench: ") and worker in line]
    assert len(printed) == 1, result["stdout"]
    line = printed[0][len("workbench: ") :]
    assert result["events"] == [line], result  # the line is the run's event, word for word
    assert line.startswith(f"worker {worker} stopped answering mid-run"), line
    # where it went: the learner, off the lost worker onto the one left
    other = next(n for n in ("w1", "w2") if n != worker)
    assert f"learner {worker} → {other}" in line, line
    assert other in result["placed_on"] and worker not in result["placed_on"], result
    redone = int(re.search(r"(\d+|no) finished iterations? run again", line).group(1).replace("no", "0"))
    assert redone == result["lost_iterations"] <= 1, (line, result)
    assert re.search(r"\(continuing from iteration \d+\)$", line), line

    with open(log_dir / "metrics.events.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["kind"], r["message"]) for r in rows] == [("worker lost", line)], rows
    if (log_dir / "tb").exists():
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(glob.glob(os.path.join(log_dir, "tb"))[0], size_guidance={"tensors": 0})
        acc.Reload()
        texts = [t.tensor_proto.string_val[0].decode() for t in acc.Tensors("events/worker_lost/text_summary")]
        assert len(texts) == 1 and line in texts[0], texts

    assert [(e["kind"], e["message"]) for e in result["dashboard_events"]] == [("worker lost", line)], result
    report = open(result["report"], encoding="utf-8").read()
    import html

    assert html.escape(line) in report
