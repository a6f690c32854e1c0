"""A command line's embedded cluster builds its dashboard's pages at their first visit
(``embedded_cluster(dashboard_later=True)``, workbench.cluster.pages_on_visit): nothing
of Bokeh is imported until then, and then the address printed answers Dask's pages and
workbench's.

In a process of its own: the embedded cluster is one per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import json, sys, threading, time, urllib.error, urllib.request

    def status(url):
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                return answer.status, answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    if __name__ == "__main__":
        from workbench.cluster.connect import embedded_cluster, shutdown_embedded, workbench_page
        handle = embedded_cluster(2, dashboard_later=True)
        page = workbench_page(handle.client)
        base = page.rsplit("/", 1)[0]
        time.sleep(1)
        facts = {"page": page, "link": handle.dashboard_link,
                 "ready before": handle.dashboard_ready.is_set(),
                 "bokeh before": "distributed.dashboard.scheduler" in sys.modules,
                 "health": status(base + "/health")[0]}  # Dask's plain routes answer as they are
        # two first visits at once: the pages are built once, both get them
        answers = {}
        visits = [threading.Thread(target=lambda u=u: answers.__setitem__(u, status(base + u)[0]))
                  for u in ("/workbench", "/status")]
        for visit in visits:
            visit.start()
        for visit in visits:
            visit.join()
        facts.update(answers)
        facts["ready"] = handle.dashboard_ready.is_set()
        facts["individual"] = status(base + "/individual-workbench")[0]
        facts["plots"] = status(base + "/individual-plots.json")[1]
        facts["nothing"] = status(base + "/no-such-page")[0]
        facts["again"] = embedded_cluster(dashboard_later=True) is handle
        shutdown_embedded()
        print("FACTS" + json.dumps(facts))
""")


def test_the_pages_are_built_at_the_first_visit_of_the_address_printed():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("FACTS"))[len("FACTS") :])
    assert not facts["ready before"] and not facts["bokeh before"], facts  # nobody looked: nothing paid
    assert facts["health"] == 200, facts
    assert facts["page"].startswith("http://127.0.0.1:") and facts["page"].endswith("/workbench"), facts
    assert facts["link"].endswith("/status")
    assert (facts["/workbench"], facts["/status"], facts["individual"]) == (200, 200, 200), facts
    assert facts["ready"], facts
    assert "workbench" in facts["plots"].lower(), facts["plots"][:300]
    assert facts["nothing"] == 404, facts  # after the first visit, Dask's own "not found"
    assert facts["again"]
    # the start said where the dashboard is, as a start with it does
    assert "dashboard: http://127.0.0.1:" in out.stdout
