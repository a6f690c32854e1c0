"""run.show()'s video plays in a real JupyterLab, driven by headless chromium.

A notebook trains a hand-written CartPole controller for one iteration and shows one
evaluation episode; the browser runs every cell and reads the ``<video>`` element as it
plays: decoded (an H.264 mp4 the browser can play), its frames CartPole's 600×400, its
clock moving.

Needs Debian's chromium and playwright-core (``.ci/browser-setup.sh``); skipped otherwise.
"""

from __future__ import annotations

from .lab import drive, jupyterlab

CELLS = [
    "%load_ext workbench\nimport numpy as np\nimport workbench as wb",
    "%%fragment env --init\nenvs = wb.envs.make('CartPole-v1', num_envs=2, seed=replica.index)\nobs = envs.reset()",
    "%%fragment actor\naction = (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)",
    "%%fragment env\nobs, reward, terminated, truncated, info = envs.step(action)\n"
    "wb.log('charts/episodic_return', info['episode_return'])",
    "run = %fdg run --iterations 1 --steps 4",
    "run.show()",
]


def test_the_video_plays_in_jupyterlab(tmp_path):
    shot = tmp_path / "video.png"
    with jupyterlab(tmp_path, "video.ipynb", CELLS) as (url, log):
        result = drive("video.mjs", url, str(shot), "120000", timeout=900)
    assert result["ok"], f"{result.get('error')}\nscreenshot: {shot}\n{log.read_text()[-2000:]}"
    assert result["media_error"] is None and result["ready_state"] >= 2
    assert (result["width"], result["height"]) == (600, 400)
    assert result["played_s"] > 1.0 and result["duration_s"] > 1.0
    assert result["page_errors"] == [] and result["external_requests"] == []
