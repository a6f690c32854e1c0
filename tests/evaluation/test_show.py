"""run.show(): evaluation episodes as a video a browser plays (decoded here with imageio)."""

from __future__ import annotations

import dataclasses

import imageio.v3 as iio
import numpy as np
import pytest

import workbench as wb
from workbench.algorithms import mappo, ppo
from workbench.evaluation import EvaluationError, Video


@pytest.fixture(scope="module")
def ppo_run():
    return ppo.build_fdg().run(iterations=2, steps=8, progress=False)


def test_show_gives_a_playable_mp4_of_the_first_envs_episodes(ppo_run, tmp_path):
    video = ppo_run.show(episodes=2)
    assert isinstance(video, Video) and video.mime == "video/mp4"
    assert video.result.episodes == 2 and video.result.envs == (0, 0) and video.result.greedy
    assert video.frames == sum(video.result.lengths) + 1  # the reset, then a frame a step
    first = iio.imread(video.data, extension=".mp4", index=0)
    assert first.shape == (400, 600, 3) and first.dtype == np.uint8
    assert 100 < first.mean() < 255  # CartPole's white sky with a cart and a pole
    html = video._repr_html_()
    assert html.count("<video") == 1 and "data:video/mp4;base64," in html and "autoplay" in html
    assert iio.imread(video.save(str(tmp_path / "clip.mp4")), index=0).shape == first.shape


def test_show_plays_what_evaluate_counts(ppo_run):
    video = ppo_run.show(episodes=1, seed=7)
    assert video.result.seeds == (7,) and video.result.episodes == 1


def test_an_env_that_cannot_render_says_what_to_do():
    run = mappo.build_fdg({**vars(mappo), "cfg": dataclasses.replace(mappo.MAPPOConfig(), num_envs=2)}).run(
        iterations=1, steps=4, progress=False
    )
    with pytest.raises(EvaluationError, match="cannot render frames.*render\\(index\\)"):
        run.show()
    assert run.evaluate(episodes=1).episodes == 1  # evaluation needs no frames


def test_a_custom_env_that_renders_is_shown():
    class Painted:
        """Two envs whose episodes last 3 steps; env i's frame is a grey of i."""

        num_envs = 2

        def __init__(self):
            self.t = 0

        def reset(self, seed=None):
            return np.zeros((2, 1), np.float32)

        def step(self, action):
            self.t += 1
            done = np.full(2, self.t % 3 == 0)
            info = {"episode_return": np.full(int(done.sum()), 3.0, np.float32)}
            return np.zeros((2, 1), np.float32), np.ones(2, np.float32), done, np.zeros(2, bool), info

        def render(self, index=0):
            return np.full((16, 24, 3), 40 * self.t, np.uint8)

        def close(self):
            pass

    fdg = wb.FDG(namespace={"Painted": Painted, "np": np})
    fdg.add_fragment("env", "envs = Painted()\nobs = envs.reset()", rate="init")
    fdg.add_fragment("actor", "action = np.zeros(2)", rate="step")
    fdg.add_fragment("env", "obs, reward, terminated, truncated, info = envs.step(action)", rate="step")
    video = fdg.run(iterations=1, steps=2, progress=False).show(episodes=2, fps=10)
    assert video.frames == 7 and video.result.returns == (3.0, 3.0) and video.size == (24, 16)


def test_frames_must_be_images():
    with pytest.raises(ValueError, match="frames \\[N, H, W, 3\\]"):
        Video.from_frames(np.zeros((3, 4)))
