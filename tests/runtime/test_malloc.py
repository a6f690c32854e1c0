"""The malloc tuning inline runs and workers apply: the learner's temporaries, freed and
made again every minibatch, come from the heap without page faults (glibc maps blocks over
its threshold afresh, and each fresh page faults on first touch)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import workbench as wb
from workbench.runtime.process import malloc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")

FAULTS = """
import resource, sys, numpy as np, torch
from workbench.algorithms.ppo import ActorCritic, PPOConfig, adam, ppo_update
from workbench.runtime.process.malloc import tune_malloc
torch.set_num_threads(1)
print(tune_malloc())
cfg = PPOConfig(num_envs=1024)          # 16,384 samples: minibatches of 2,048 rows
T, N = cfg.num_steps, 1024
obs = np.random.default_rng(0).normal(size=(T, N, 4)).astype(np.float32)
agent = ActorCritic(4, 2, norm_obs=True)
opt = adam(agent.parameters(), 3e-3)
act, logp, val = (np.stack(x) for x in zip(*(agent.act(s) for s in obs)))
faults = []
for i in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ppo_update(agent, opt, cfg, i, obs, act, logp, val, np.ones((T, N), np.float32),
               np.zeros((T, N), bool), obs[-1], np.zeros(N, bool))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[1:]))
"""


def test_tuned_a_ppo_learner_s_updates_fault_no_pages_in():
    """Untuned, every update at 1,024 envs page-faulted ~7,700 times (its temporaries mapped
    afresh each minibatch: 56 against 42 ms an update); tuned, after the first, none."""
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    set_to, faults = out.stdout.strip().splitlines()[-2:]
    assert set_to == "{'mmap_threshold': 33554432, 'trim_threshold': 67108864}"
    assert int(faults) < 500, f"{faults} page faults in 4 updates"


def test_an_inline_run_tunes_its_process():
    fdg = wb.FDG()
    fdg.add_fragment("counter", "n = 0", rate="init")
    fdg.add_fragment("counter", "n += 1", rate="step")
    fdg.run(iterations=1, steps=1, policy="inline", progress=False)
    assert malloc._done == {"mmap_threshold": malloc.MMAP_THRESHOLD, "trim_threshold": 2 * malloc.MMAP_THRESHOLD}


RELEASE = """
import sys
from workbench.runtime.process.malloc import release_free_memory, resident_bytes, tune_malloc
tune_malloc()
blocks = [b"x" * (1 << 20) for _ in range(300)]   # 300 MiB of heap blocks (under the mmap threshold)
pin = b"y" * (1 << 20)                               # in use above them: no trimming of the top
before_free = resident_bytes()
del blocks
kept = resident_bytes()
print(before_free >> 20, kept >> 20, release_free_memory(above=0), resident_bytes() >> 20)
"""


def test_memory_a_run_freed_goes_back_to_the_os_when_it_ends():
    """Freed heap blocks under a block still in use stay resident (what a worker kept after
    a big model's run: GBs); release_free_memory gives them back."""
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, check=True)
    grown, kept, released, after = out.stdout.split()
    assert released == "True"
    assert int(kept) > int(grown) - 50  # freeing alone returned (almost) nothing
    assert int(kept) - int(after) > 250  # the trim gave the 300 MiB back


INLINE_RUN = """
import workbench as wb
from workbench.runtime.process.malloc import resident_bytes
fdg = wb.FDG()
fdg.add_fragment("big", "blocks = [b'x' * (1 << 20) for _ in range(1300)]\\nn = 0", rate="init")
fdg.add_fragment("big", "n += 1", rate="step")
fdg.run(iterations=1, steps=1, progress=False, keep_state=False)   # warm: imports, threads
before = resident_bytes()
fdg.run(iterations=1, steps=1, progress=False, keep_state=False)
print(before >> 20, resident_bytes() >> 20)
"""


def test_an_inline_run_that_grew_the_notebook_by_gibs_gives_them_back():
    """A run whose replicas held 1.3 GiB (a big model's weights and optimiser, say) leaves the
    notebook's process about as big as before it, not 1.3 GiB bigger."""
    out = subprocess.run([sys.executable, "-c", INLINE_RUN], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split()[-2:])
    assert after - before < 300, (before, after)
