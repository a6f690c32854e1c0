"""A ``# comment`` after a magic's words is a comment, as in the docs' cells
(``%%fragment actor   # every step (the default)``, ``%fdg   # draw the FDG``): a cell
copied from a page runs as it reads. Before, argparse refused the comment's words
(``unrecognized arguments: # every step``) and ``%fdg`` took ``#`` for a command."""

from __future__ import annotations

import workbench as wb


def _ok(ip, cell: str):
    result = ip.run_cell(cell)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def test_comments_after_magic_words_are_comments(ip, capsys):
    _ok(ip, "%%fragment env --init   # once, at the start\nobs = np.zeros(2)\n")
    _ok(ip, "%%fragment actor   # every step (the default)\naction = obs + 1\n")
    _ok(ip, "%%fragment env  # every step\nobs = action * 0.5\nreward = action.copy()\n")
    _ok(ip, "%%fragment learner --every iteration # once an iteration\nseen = reward.shape[0]\n")
    fdg = _ok(ip, "%fdg   # draw the FDG")
    assert isinstance(fdg, wb.FDG) and sorted(fdg.fragments) == ["actor", "env", "learner"]
    assert fdg.fragments["learner"].cells.keys() == {"iteration"}
    run = _ok(ip, "%fdg run --iterations 2 --steps 1 --no-progress  # a short one")
    assert run.status == "finished" and run.completed_iterations == 2


def test_a_hash_inside_quotes_or_a_word_is_not_a_comment(ip, tmp_path):
    _ok(ip, "%%fragment env --init\nobs = np.zeros(2)\n")
    _ok(ip, "%%fragment env\nobs = obs + 1\nreward = obs.copy()\n")
    logs = tmp_path / "a #1"
    run = _ok(ip, f"%fdg run --iterations 1 --steps 1 --no-progress --log-dir '{logs}'")
    assert run.status == "finished" and logs.is_dir()
