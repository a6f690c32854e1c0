"""A resume never starts past the first iteration the driver has not recorded: a worker
lost mid-iteration can take its report of iteration i with it after every replica's
snapshot of i + 1 arrived (found by the SIGSTOP test: the record skipped an iteration)."""

from __future__ import annotations

from workbench.runtime.state.snapshots import SnapshotBook, snapshot_key


def _fill(book: SnapshotBook, iterations) -> None:
    for it in iterations:
        for group, index in [("learner", 0), ("actor", 0), ("actor", 1)]:
            book.put(snapshot_key(group), it, index, f"{group}{index}@{it}".encode())


def test_latest_stops_at_the_first_unrecorded_iteration():
    book = SnapshotBook({"learner": 1, "actor": 2})
    book.settle(5)  # iterations 0-4 recorded
    _fill(book, [4, 5, 6])  # every replica already sent 6: iteration 5's reports were lost
    iteration, pickled = book.latest()
    assert iteration == 5 and pickled[("actor", 1)] == b"actor1@5"


def test_snapshots_a_resume_may_need_are_kept_when_newer_ones_complete():
    book = SnapshotBook({"learner": 1, "actor": 2})
    book.settle(4)
    _fill(book, [2, 4, 6, 8])  # every second iteration (snapshot_every=2)
    assert book.latest()[0] == 4
    book.settle(9)
    assert book.latest()[0] == 8


def test_without_a_limit_the_newest_complete_one_is_used():
    book = SnapshotBook({"learner": 1, "actor": 2})
    _fill(book, [1, 2])
    assert book.latest()[0] == 2
