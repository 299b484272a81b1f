"""One deadline per key, earliest first, re-armed lazily; the wait wakes for an earlier one."""

from __future__ import annotations

import threading
import time

from coordinator.live_nodes.gpunodes.deadlines import Deadlines


def test_keys_come_up_once_earliest_first_and_strictly_after_their_deadline() -> None:
    deadlines = Deadlines()
    deadlines.arm("b", 20.0)
    deadlines.arm("a", 10.0)
    assert deadlines.take_due(10.0) == []
    assert deadlines.take_due(25.0) == ["a", "b"]
    assert deadlines.take_due(99.0) == []
    assert len(deadlines) == 0


def test_a_later_arm_is_free_and_an_earlier_one_wins() -> None:
    deadlines = Deadlines()
    deadlines.arm("a", 10.0)
    deadlines.arm("a", 15.0)  # already comes up sooner: nothing changes
    assert deadlines.armed_at("a") == 10.0
    deadlines.arm("a", 5.0)
    assert deadlines.take_due(6.0) == ["a"]
    assert deadlines.take_due(11.0) == []  # the superseded entry is skipped


def test_the_wait_ends_when_an_earlier_deadline_is_armed() -> None:
    deadlines = Deadlines()
    stop = threading.Event()
    deadlines.arm("far", time.monotonic() + 600)
    waiter = threading.Thread(target=deadlines.wait, args=(time.monotonic, stop))
    waiter.start()
    deadlines.arm("near", time.monotonic())
    waiter.join(timeout=10)
    assert not waiter.is_alive()


def test_wake_ends_a_wait_without_deadlines() -> None:
    deadlines = Deadlines()
    stop = threading.Event()
    waiter = threading.Thread(target=deadlines.wait, args=(time.monotonic, stop))
    waiter.start()
    stop.set()
    deadlines.wake()
    waiter.join(timeout=10)
    assert not waiter.is_alive()
