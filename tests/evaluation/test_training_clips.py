"""``--video-every N``: clips of the agent while it trains, played from the run's own state
in a low-priority child process (workbench.training_clips), into ``run.clips``, the loggers
that take clips (TensorBoard's) and the live view. Training must not change because of them."""

from __future__ import annotations

import dataclasses
import os

import imageio.v3 as iio
import pytest

from workbench.algorithms import mappo, ppo
from workbench.config import DEFAULT_VIDEO_EVERY, RunConfig, parse_run_line
from workbench.errors import RunConfigError
from workbench.training_clips import Clip

#: a clip is made at the lowest priority: on two busy cores it may take a while
CLIP_WAIT_S = 300
SEED_OPTIONS = dict(iterations=45, steps=16, progress=False, run_store="off")


@pytest.fixture(scope="module")
def with_clips(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("clips")
    run = ppo.build_fdg().run(video_every=20, log_dir=str(log_dir), **SEED_OPTIONS)
    run.wait_for_clips(CLIP_WAIT_S)
    return run, log_dir


def test_clips_are_played_from_the_state_every_n_iterations(with_clips):
    run, _ = with_clips
    assert run.status == "finished" and run.clips, run.events
    assert {c.iteration for c in run.clips} <= {20, 40}
    for clip in run.clips:
        assert isinstance(clip, Clip) and clip.video.mime == "video/mp4" and clip.video.frames > 1
        assert clip.result.iteration == clip.iteration and clip.result.greedy and clip.result.episodes == 1
        # the whole run's env steps when its state was taken (not only the first env replica's)
        assert clip.env_steps == run.rows[clip.iteration - 1]["env_steps"]
        frame = iio.imread(clip.video.data, extension=".mp4", index=0)
        assert frame.shape == (400, 600, 3)
        assert f"iteration {clip.iteration}" in clip.caption() and "<video" in clip._repr_html_()


def test_training_is_the_same_with_clips_as_without(with_clips):
    run, _ = with_clips
    plain = ppo.build_fdg().run(**SEED_OPTIONS)
    assert plain.episode_returns == run.episode_returns and plain.env_steps == run.env_steps
    assert plain.clips == [] and plain.wait_for_clips(0) == []


def test_tensorboard_gets_each_clip_as_an_animated_image_and_an_mp4(with_clips):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, log_dir = with_clips
    events = EventAccumulator(str(log_dir), size_guidance={"images": 0})
    events.Reload()
    images = events.Images("videos/agent")
    assert [i.step for i in images] == [c.env_steps for c in run.clips]
    gif = images[0].encoded_image_string
    assert gif[:6] in (b"GIF87a", b"GIF89a") and iio.imread(gif, index=None).shape[0] > 1  # animated
    assert sorted(os.listdir(log_dir / "clips")) == [f"iteration_{c.iteration:07d}.mp4" for c in run.clips]


def test_clips_on_a_cluster_come_from_the_replicas_snapshots(client):
    run = ppo.build_fdg().run(policy="coarse", cluster=client, video_every=10, **{**SEED_OPTIONS, "iterations": 25})
    clips = run.wait_for_clips(CLIP_WAIT_S)
    assert clips and {c.iteration for c in clips} <= {10, 20}
    assert all(c.video.frames > 1 and c.env_steps == run.rows[c.iteration - 1]["env_steps"] for c in clips)


def test_checkpoints_stay_where_asked_when_clips_take_full_snapshots_too(tmp_path):
    run = ppo.build_fdg().run(
        video_every=10, checkpoint_dir=str(tmp_path), checkpoint_every=15, **{**SEED_OPTIONS, "iterations": 31}
    )
    run.wait_for_clips(CLIP_WAIT_S)
    written = sorted(int(os.path.basename(path).split("-")[1]) for path in run.checkpoints[:-1])
    assert written == [15, 30], run.checkpoints  # not 10 or 20: those full snapshots were the clips'


def test_an_env_that_cannot_draw_costs_the_clips_not_the_run():
    cfg = dataclasses.replace(mappo.MAPPOConfig(), num_envs=2)
    run = mappo.build_fdg({**vars(mappo), "cfg": cfg}).run(
        iterations=3, steps=4, video_every=1, progress=False, run_store="off"
    )
    run.wait_for_clips(CLIP_WAIT_S)
    assert run.status == "finished" and run.clips == []
    said = {event.kind: event.message for event in run.events}
    assert "cannot render frames" in said["clip failed"], run.events


@pytest.mark.parametrize("line, every", [("--video-every", DEFAULT_VIDEO_EVERY), ("--video-every 7", 7), ("", None)])
def test_video_every_alone_takes_its_default(line, every):
    assert parse_run_line(line).get("video_every") == every


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "often"])
def test_a_video_every_that_is_no_whole_number_is_refused(bad):
    with pytest.raises(RunConfigError, match="--video-every must be a whole number ≥ 1"):
        RunConfig(video_every=bad)


def test_the_live_view_shows_the_newest_clip_under_its_plots(with_clips):
    from workbench.widgets.live import LiveView

    run, _ = with_clips
    view = LiveView(total=45, title="SingleLearnerCoarse")
    assert view.clip_view.value == "" and view.clip_view in view.widget.children
    view.clip(run.clips[-1])
    shown = view.clip_view.value
    assert shown.count("<video") == 1 and f"iteration {run.clips[-1].iteration}" in shown
