"""glibc's malloc thresholds for an RL process: big temporaries reused, not mapped afresh.

glibc hands out blocks above its *mmap threshold* (128 KiB at start) as fresh ``mmap``
regions, which page-fault on first touch and go back to the OS when freed; it returns the
heap's free top to the OS past its *trim threshold*. Its adaptive mode raises both once a
mapped block that large is freed, up to 32 MiB (and 64 MiB for trimming). A PPO learner's
temporaries are 0.5–4 MiB a minibatch, every minibatch: measured at 1,024 CartPole envs,
a fresh process stayed at 56–57 ms an update for a whole run, 42–43 ms with the thresholds
at adaptive mode's maximum — and the same 42 ms came, by accident, from anything that had
freed a big block first (importing ``torch._dynamo``, which ``torch.optim`` did before
``FusedAdam``). :func:`tune_malloc` sets them there once per process: inline runs do it
at start (`runtime.inline`), and so does every Dask worker (`cluster.worker_setup`), where
Dask's nanny also pins ``MALLOC_TRIM_THRESHOLD_=65536`` (which switches adaptive mode off:
every tensor over 128 KiB mapped afresh, the learner ~1.5× slower).

What it costs: freed heap kept by the process instead of returned to the OS (past the top's
64 MiB, and whatever lies between blocks still in use); within a run the working set is
steady, so it is used again. Between runs it is not (a run's replicas run in new threads,
which glibc gives other malloc arenas than the last run's): a worker that ran GRPO with a
113M-parameter model kept 4.5–8.6 GB after each run (no object of it alive), and the next
run's peak on top was killed by the kernel on this 24 GiB machine. So when a run ends,
:func:`release_free_memory` gives what is free back (``malloc_trim``) in a process that has
grown past a GiB (`cluster.worker_control` on each worker), or that the run grew by a GiB
(`runtime.inline`, in the notebook's own process, which may be big with the user's data).

Example:
    >>> tune_malloc() in ({}, {"mmap_threshold": 33554432, "trim_threshold": 67108864})
    True
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

__all__ = ["tune_malloc", "release_free_memory", "resident_bytes", "MMAP_THRESHOLD", "RELEASE_ABOVE_BYTES"]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: the mmap threshold glibc's adaptive mode grows to at most on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
MMAP_THRESHOLD = 32 * 1024 * 1024

_done: dict[str, int] | None = None


def tune_malloc() -> dict[str, int]:
    """Set glibc's mmap and trim thresholds to adaptive mode's maximum (32 and 64 MiB), once
    per process; returns what was set (empty: not Linux, or a libc without ``mallopt``)."""
    global _done
    if _done is not None:
        return _done
    _done = {}
    if not sys.platform.startswith("linux"):
        return _done
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own libc: no library search
    except (OSError, AttributeError):  # musl and others: nothing to tune
        return _done
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    wanted = {
        "mmap_threshold": (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        "trim_threshold": (_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD),
    }
    for name, (param, value) in wanted.items():
        if mallopt(param, value) == 1:
            _done[name] = value
    return _done


#: a process smaller than this gives nothing back at a run's end: not worth the walk
RELEASE_ABOVE_BYTES = 1 << 30


def resident_bytes() -> int | None:
    """This process's resident memory (Linux), or None."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_free_memory(above: int = RELEASE_ABOVE_BYTES) -> bool:
    """After a run: collect its cycles and return the heap's free memory to the OS
    (glibc's ``malloc_trim(0)``, which also frees whole free pages between blocks in use), if
    this process is resident above ``above`` bytes. True when it did.

    >>> release_free_memory(above=1 << 62)   # a process this big: never
    False
    """
    size = resident_bytes()
    if not sys.platform.startswith("linux") or size is None or size < above:
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    gc.collect()  # a run's networks sit in reference cycles (modules, optimisers)
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
