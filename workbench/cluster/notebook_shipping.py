"""The notebook's values go to the workers once per deploy, not once per replica.

Every replica's deploy task needs the notebook's namespace: its ``cfg``, the classes and
functions the cells use, a model object the user put in ``cfg.model``. Passed as an argument
of each replica's ``client.submit``, it was pickled into the task graph once per replica and
travelled client → scheduler → worker: on the dev machine a 453 MB model (113M parameters)
took 4–6 s a replica that way, and Dask warned of a large task graph. Scattered once,
straight to one of the run's workers (Dask copies it worker to worker where another replica
needs it), it takes ~0.3 s, and each deploy task names it by its key.

Replicas in one worker process then start from the same notebook objects, as the replicas of
an inline run always did; each replica still has its own namespace, and cells copy what they
change (the algorithms' init cells deep-copy a model given in ``cfg.model``).

Example (``client`` a connected `distributed.Client`)::

    with shipped(client, {"cfg": cfg}, worker_addresses) as notebook:
        futures = [client.submit(deploy, notebook, workers=[w]) for w in worker_addresses]
        results = [f.result() for f in futures]
    # the scattered copy is released; the replicas keep what their namespaces reference
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from distributed import Client, Future

__all__ = ["shipped"]


@contextmanager
def shipped(client: Client, notebook: dict[str, Any], addresses: Iterable[str]) -> Iterator[Future]:
    """``notebook`` scattered to one of ``addresses`` for the body's tasks, released after."""
    # a list of one: scattering the dict itself would scatter each value under its own key
    [future] = client.scatter([notebook], workers=sorted(set(addresses)), hash=False)
    try:
        yield future
    finally:
        future.release()
