"""The device check's ``mappo`` part: MPE simple_spread on the GPU, the env alone and MAPPO
under GPUOnly, beside the host env (``python -m benchmarks device_check --parts mappo``).

Rows by number of envs:

- the env alone, env-steps/s: NumPy on the host; CuPy with mpe2's host resets (which read
  the ended envs back every step); CuPy with ``resets="counter"`` (the device resets
  ``make(..., device="cuda:K")`` gives, no read back);
- MAPPO (the notebook's cells) under GPUOnly, steady env-steps/s (iterations after the
  third, by their own time), with the env on the GPU and on the host.

Before the device resets (H100, 2026-11-25) MAPPO under GPUOnly stepped ~2,000 env-steps/s.
"""

from __future__ import annotations

import json
import sys

from benchmarks.harness import env_step_rate, steady_rate


def _env_rates(n: int) -> dict:
    import numpy as np

    from workbench.envs import SimpleSpread

    steps = max(20, min(200, 400_000 // n))
    actions = (np.arange(n * 3).reshape(n, 3) % 5).astype(np.int64)
    host = SimpleSpread(n, seed=0)
    host.reset()
    row = {"env numpy env-steps/s": env_step_rate(host, actions, steps)}
    try:
        import cupy

        sync = cupy.cuda.get_current_stream().synchronize
        for resets in ("mpe2", "counter"):
            env = SimpleSpread(n, seed=0, xp=cupy, resets=resets)
            env.reset()
            row[f"env cupy {resets} resets env-steps/s"] = env_step_rate(env, cupy.asarray(actions), steps, sync)
    except Exception as exc:  # noqa: BLE001
        row["cupy"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
    return row


def _mappo_rate(client, n: int, env_on_gpu: bool, iterations: int) -> float:
    import workbench as wb
    from workbench.algorithms import mappo

    cfg = mappo.MAPPOConfig(num_envs=n, iterations=iterations)
    fdg = wb.FDG(namespace={**vars(mappo), "cfg": cfg})
    for line, body in mappo.FRAGMENT_CELLS:
        fdg.add_cell(line, body if env_on_gpu else body.replace("device=replica.device)", 'device="cpu")'))
    run = fdg.run(iterations=iterations, steps=cfg.num_steps, policy="gpuonly", cluster=client, progress=False)
    return steady_rate(run)


def part_mappo(env_counts=(64, 1024, 8192), iterations: int = 8) -> list[dict]:
    """The rows described above, one per number of envs."""
    import logging

    from distributed import Client, LocalCluster

    rows = []
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        _mappo_rate(client, 64, True, 2)  # warm: imports, CUDA context, kernels
        for n in env_counts:
            row = {"part": "mappo", "what": f"simple_spread × {n:,}", **_env_rates(n)}
            for on_gpu in (True, False):
                key = f"MAPPO gpuonly, env on {'GPU' if on_gpu else 'host'}, env-steps/s"
                try:
                    row[key] = _mappo_rate(client, n, on_gpu, iterations)
                except Exception as exc:  # noqa: BLE001
                    row[key] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows
