"""The embedded dashboard's pages, built at their first visit.

Importing Bokeh and Dask's dashboard and building its pages is ~1.3 s of CPU under the GIL
of the process that runs the scheduler. For a command-line sweep that process is the
driver: it spent that at its start, beside the notebook's own import of torch, before the
first trial could start. A scheduler started with ``dashboard=False`` still listens on the
dashboard's address and answers its plain HTTP routes (``/health``, ``/info``, ``/json``…);
:func:`serve_pages_on_first_visit` puts one catch-all handler behind those. The first
request for any other path imports the dashboard in a thread, connects its pages
(:func:`workbench.cluster._dask_compat.connect_dashboard`, workbench's ``/workbench`` page
among them), steps aside and sends the browser back to the same address, which the pages
then answer. A cluster nobody looks at never pays for them.

Example::

    ready = threading.Event()
    serve_pages_on_first_visit(cluster.scheduler, ready)
"""

from __future__ import annotations

import asyncio
import threading

from tornado import web

from workbench.cluster._dask_compat import connect_dashboard

__all__ = ["serve_pages_on_first_visit"]


def serve_pages_on_first_visit(scheduler, ready: threading.Event) -> None:
    """Answer the first visit of ``scheduler``'s dashboard by building its pages; set
    ``ready`` once they are there. From any thread: it only adds a handler to the list the
    scheduler's HTTP server looks through."""
    routing = scheduler.http_application
    attach = _Attach(scheduler, ready)
    placeholder = web.Application([(r".*", _FirstVisit, {"attach": attach})])
    attach.step_aside = lambda: routing.applications.remove(placeholder)
    routing.add_application(placeholder)


def _import_pages() -> None:
    import distributed.dashboard.scheduler  # noqa: F401  (Bokeh and Dask's pages)

    import workbench.cluster.dashboard  # noqa: F401  (registers /workbench with them)


class _Attach:
    """Builds the pages once, whichever visit comes first."""

    def __init__(self, scheduler, ready: threading.Event) -> None:
        self.scheduler, self.ready = scheduler, ready
        self.step_aside = lambda: None
        self.lock = asyncio.Lock()

    async def __call__(self) -> None:
        async with self.lock:
            if self.ready.is_set():
                return
            try:
                await asyncio.get_running_loop().run_in_executor(None, _import_pages)
                connect_dashboard(self.scheduler)
            finally:  # built or not (no Bokeh): the pages, or Dask's "not found", from now on
                self.step_aside()
                self.ready.set()


class _FirstVisit(web.RequestHandler):
    """Any dashboard page before the pages exist: build them, then come back."""

    def initialize(self, attach: _Attach) -> None:
        self.attach = attach

    async def get(self, *args) -> None:
        await self.attach()
        self.redirect(self.request.uri)
