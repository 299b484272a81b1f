"""run_worker: one pass per key, queued again as the pass asks, retried when it raises."""

from __future__ import annotations

import logging
import threading

import pytest

from coordinator.kube.workqueue import WorkQueue, run_worker
from tests.support.clock import ManualClock


def drain(queue: WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(0)) is not None:
        keys.append(key)
    return keys


def test_worker_requeues_as_asked_retries_failures_and_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    queue = WorkQueue(clock)
    stop = threading.Event()
    seen: list[str] = []

    def one_pass(key: str) -> float | None:
        seen.append(key)
        if key == "boom":
            raise RuntimeError("the API server is away")
        if key == "last":
            stop.set()  # a pass that ends the worker is not queued again
            return 1.0
        return 3.0 if key == "again" else None

    for key in ("again", "done", "boom", "last"):
        queue.add(key)
    with caplog.at_level(logging.ERROR):
        run_worker(
            queue, one_pass, stop, error_retry_seconds=7.0, failure="pass failed", key_name="thing"
        )

    assert seen == ["again", "done", "boom", "last"]
    failed = [r for r in caplog.records if r.getMessage() == "pass failed"]
    assert [getattr(r, "thing", None) for r in failed] == ["boom"]
    assert drain(queue) == []
    clock.advance(3.0)
    assert drain(queue) == ["again"]
    clock.advance(4.0)
    assert drain(queue) == ["boom"]
    clock.advance(100.0)
    assert drain(queue) == []


def test_a_pass_already_due_sooner_stands_in_for_the_requeue_a_pass_asks() -> None:
    """Every pass recomputes when it wants the next: a change during a pass queued one sooner
    than the pass's own request, so that request adds no pass of its own."""
    clock = ManualClock()
    queue = WorkQueue(clock)
    stop = threading.Event()

    def one_pass(key: str) -> float | None:
        if key == "stop":
            stop.set()
            return None
        queue.add_within(key, 0.5)  # a change while the pass runs, followed within 0.5 s
        return 3.0  # and the pass would look again in 3 s

    queue.add("gpu")
    queue.add("stop")
    run_worker(queue, one_pass, stop, error_retry_seconds=1.0, failure="", key_name="k")

    clock.advance(0.5)
    assert drain(queue) == ["gpu"]
    clock.advance(10.0)
    assert drain(queue) == []  # no second pass at 3 s: the one at 0.5 s asks its own


def test_worker_returns_at_once_when_stopped() -> None:
    queue = WorkQueue(ManualClock())
    queue.add("never")
    stop = threading.Event()
    stop.set()
    run_worker(queue, lambda _key: None, stop, error_retry_seconds=1.0, failure="", key_name="k")
    assert drain(queue) == ["never"]


def test_changes_within_a_second_of_each_other_are_one_pass() -> None:
    clock = ManualClock()
    queue = WorkQueue(clock)
    for _ in range(5):
        queue.add_within("gpu", 1.0)
        clock.advance(0.1)
    assert drain(queue) == []  # not yet: the burst may go on
    clock.advance(0.5)
    assert drain(queue) == ["gpu"]
    clock.advance(10.0)
    assert drain(queue) == []  # one pass for the five changes
    # A change while the key is queued for now adds nothing; one after it was taken, a pass.
    queue.add("gpu")
    queue.add_within("gpu", 1.0)
    assert drain(queue) == ["gpu"]
    clock.advance(1.0)
    assert drain(queue) == []
    queue.add_within("gpu", 1.0)
    clock.advance(1.0)
    assert drain(queue) == ["gpu"]
    # A pass due later (a requeue in 30 s) does not stand in for one within the second.
    queue.add_after("gpu", 30.0)
    queue.add_within("gpu", 1.0)
    clock.advance(1.0)
    assert drain(queue) == ["gpu"]


def test_a_worker_that_rests_hands_out_nothing_until_its_rest_ends() -> None:
    """After a pass of 0.3 s the worker rests as `rest` says (here as long as the pass took):
    the changes that come meanwhile are one pass, taken once the rest is over."""
    clock = ManualClock()
    queue = WorkQueue(clock)
    stop = threading.Event()
    rests: list[float] = []

    def one_pass(_key: str) -> float | None:
        clock.advance(0.3)  # the pass takes 0.3 s
        stop.set()  # and is the last: what the worker leaves behind is looked at below
        return None

    def rest(pass_seconds: float) -> float:
        rests.append(pass_seconds)
        return pass_seconds

    queue.add("gpu")
    run_worker(queue, one_pass, stop, error_retry_seconds=1.0, failure="", key_name="k", rest=rest)
    assert rests == [pytest.approx(0.3)]
    for _ in range(3):
        queue.add("gpu")  # three changes during the rest
        clock.advance(0.05)
    clock.advance(0.1)
    assert drain(queue) == []  # 0.55 s: resting until 0.6 s
    clock.advance(0.1)
    assert drain(queue) == ["gpu"]  # one pass for the three, once the rest is over
    assert drain(queue) == []


def test_a_rest_holds_back_delayed_keys_too_and_ends_by_the_queues_clock() -> None:
    clock = ManualClock()
    queue = WorkQueue(clock)
    queue.add_within("gpu", 0.1)
    queue.rest(0.5)
    clock.advance(0.2)
    assert queue.get(0) is None  # due, but the worker rests
    clock.advance(0.3)
    assert queue.get(0) == "gpu"
    queue.rest(0.0)
    queue.add("gpu")
    assert queue.get(0) == "gpu"  # no rest: at once
