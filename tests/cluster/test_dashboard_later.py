"""A command line's embedded cluster serves the dashboard's pages once its scheduler runs
(``embedded_cluster(dashboard_later=True)``): same address, Dask's pages and workbench's.

In a process of its own: the embedded cluster is one per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import json, urllib.error, urllib.request

    def status(url):
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                return answer.status, answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    if __name__ == "__main__":
        from workbench.cluster.connect import embedded_cluster, shutdown_embedded, workbench_page
        handle = embedded_cluster(2, dashboard_later=True)
        page = workbench_page(handle.client)
        ready = handle.dashboard_ready.wait(120)
        base = page.rsplit("/", 1)[0]
        facts = {"ready": ready, "page": page, "link": handle.dashboard_link,
                 "workbench": status(page)[0], "status": status(base + "/status")[0],
                 "individual": status(base + "/individual-workbench")[0],
                 "plots": status(base + "/individual-plots.json")[1]}
        # the same handle again: the cluster, and its dashboard, are reused
        facts["again"] = embedded_cluster(dashboard_later=True) is handle
        shutdown_embedded()
        print("FACTS" + json.dumps(facts))
""")


def test_the_pages_come_once_the_scheduler_runs_at_the_address_printed():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("FACTS"))[len("FACTS") :])
    assert facts["ready"], facts
    assert facts["page"].startswith("http://127.0.0.1:") and facts["page"].endswith("/workbench"), facts
    assert facts["link"].endswith("/status")
    assert (facts["workbench"], facts["status"], facts["individual"]) == (200, 200, 200), facts
    assert "workbench" in facts["plots"].lower(), facts["plots"][:300]
    assert facts["again"]
    # the start said where the dashboard is, as a start with it does
    assert "dashboard: http://127.0.0.1:" in out.stdout
