"""Turn a run's per-iteration timing columns into profiles (pandas DataFrames).

The runtime records, per finished iteration (``Run.rows``):

- ``time/<fragment>_compute_s`` — seconds in that fragment's cells, summed over its replicas;
- ``time/<group>[<i>] <kind>_s`` per group replica, ``kind`` one of ``wait`` (for inputs
  from other groups), ``compute`` (its cells), ``send`` (its outputs), ``other`` (the rest
  of its tasks: binding inputs, stacking step buffers, emitting);
- ``time/<group>[<i>] send_cpu_s`` — of ``send``, the CPU time of the replica's thread
  (the rest waited: for the GIL, a core, a socket's buffer); not one of the kinds that
  add up to an iteration;
- ``wire/bytes`` — bytes that crossed processes; ``time_s`` — seconds since the run started.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["profile", "profile_by_iteration", "KINDS"]

#: the per-replica time columns, in the order they add up to an iteration
KINDS = ("compute", "wait", "send", "other")
_REPLICA = re.compile(r"^time/(?P<name>.+\[\d+\]) (?P<kind>wait|send|compute|other)_s$")
_FRAGMENT = re.compile(r"^time/(?P<name>[^ ]+)_compute_s$")


def _columns(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(fragment names, group-replica names) in first-seen order."""
    fragments, replicas = {}, {}
    for row in rows:
        for col in row:
            m = _REPLICA.match(col)
            if m:
                replicas[m["name"]] = None
                continue
            m = _FRAGMENT.match(col)
            if m:
                fragments[m["name"]] = None
    return list(fragments), list(replicas)


def profile_by_iteration(run, *, skip: int = 0):
    """One row per (iteration, group replica): ``compute_s``, ``wait_s``, ``send_s``,
    ``other_s``, their sum ``accounted_s``, the iteration's ``wall_s`` (difference of
    consecutive ``time_s``; the first iteration's counts from the run's start, deploying
    included) and ``accounted_share`` = accounted / wall. ``skip`` drops the first
    iterations (deploy, warm-up)."""
    import pandas as pd

    rows = run.rows[skip:]
    _, replicas = _columns(rows)
    previous = run.rows[skip - 1]["time_s"] if skip > 0 and len(run.rows) >= skip else 0.0
    out = []
    for row in rows:
        wall = row["time_s"] - previous
        previous = row["time_s"]
        for name in replicas:
            rec = {"iteration": row["iteration"], "replica": name}
            for kind in KINDS:
                rec[f"{kind}_s"] = row.get(f"time/{name} {kind}_s", 0.0)
            rec["accounted_s"] = sum(rec[f"{kind}_s"] for kind in KINDS)
            rec["wall_s"] = wall
            rec["accounted_share"] = rec["accounted_s"] / wall if wall > 0 else float("nan")
            out.append(rec)
    columns = ["iteration", "replica", *(f"{k}_s" for k in KINDS), "accounted_s", "wall_s", "accounted_share"]
    return pd.DataFrame(out, columns=columns).set_index(["iteration", "replica"])


def profile(run, *, skip: int = 0):
    """Where the run's time went: one row per fragment (``kind="fragment"``: its compute,
    summed over replicas), per group replica (``kind="replica"``: compute, wait, send,
    other) and the whole run (``kind="run"``: wall time and bytes on the wire).

    Columns: totals (``compute_s``, ``wait_s``, ``send_s``, ``other_s``, ``total_s``),
    per-iteration means (``…_per_it``), ``share_of_wall`` = total / wall time (a fragment
    with n replicas can reach n), ``bytes`` and ``bytes_per_it`` (run row only: the
    runtime counts bytes per iteration, not per replica). ``skip`` leaves out the first
    iterations (the wall time then starts at the end of the last one skipped)."""
    import pandas as pd

    rows = run.rows[skip:]
    n = len(rows)
    fragments, replicas = _columns(rows)
    start = run.rows[skip - 1]["time_s"] if skip > 0 and len(run.rows) >= skip else 0.0
    wall = (rows[-1]["time_s"] - start) if rows else 0.0
    records = []

    def add(name: str, kind: str, totals: dict[str, float], **extra) -> None:
        rec: dict[str, Any] = {"name": name, "kind": kind}
        for k in KINDS:
            rec[f"{k}_s"] = totals.get(k, float("nan") if kind == "fragment" and k != "compute" else 0.0)
        rec["total_s"] = totals["total"] if "total" in totals else sum(totals.get(k, 0.0) for k in KINDS)
        for k in (*KINDS, "total"):
            rec[f"{k}_s_per_it"] = rec[f"{k}_s"] / n if n else float("nan")
        rec["share_of_wall"] = rec["total_s"] / wall if wall > 0 else float("nan")
        rec.update(extra)
        records.append(rec)

    for frag in fragments:
        add(frag, "fragment", {"compute": sum(r.get(f"time/{frag}_compute_s", 0.0) for r in rows)})
    for name in replicas:
        add(name, "replica", {k: sum(r.get(f"time/{name} {k}_s", 0.0) for r in rows) for k in KINDS})
    total_bytes = sum(r.get("wire/bytes", 0) for r in rows)
    add("(run)", "run", {"total": wall}, bytes=total_bytes, bytes_per_it=total_bytes / n if n else float("nan"))
    df = pd.DataFrame(records).set_index("name")
    df.loc[df["kind"] == "run", [f"{k}_s" for k in KINDS] + [f"{k}_s_per_it" for k in KINDS]] = float("nan")
    return df
