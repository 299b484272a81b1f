"""One pending deadline per key, earliest first: when to look at a node again.

The GPUNode mirror arms each fresh node at the moment its record would turn stale. A heap
keeps the earliest first, so a thread sleeps exactly until the next one instead of polling
every node. Re-arming is lazy: arming a key already armed earlier costs a dict lookup and
nothing else (the earlier wake-up finds the key still fresh and arms it at its real
deadline), so thousands of heartbeats a second never touch the heap; arming a key earlier
than before leaves the old entry in the heap, skipped when it comes up. Times come from the
caller's clock, so tests drive `take_due` with a manual one and never sleep.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable

# Deadlines are strict ("stale after"): the wait ends this much after one, not at it.
SLACK_SECONDS = 0.01


class Deadlines:
    """Thread-safe: arm from any thread; one thread takes what is due and waits for more."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._armed: dict[str, float] = {}
        self._cond = threading.Condition()

    def __len__(self) -> int:
        with self._cond:
            return len(self._armed)

    def arm(self, key: str, at: float) -> None:
        """Make sure `key` comes up no later than `at`."""
        with self._cond:
            armed = self._armed.get(key)
            if armed is not None and armed <= at:
                return
            earliest = self._heap[0][0] if self._heap else None
            self._armed[key] = at
            heapq.heappush(self._heap, (at, key))
            if earliest is None or at < earliest:
                self._cond.notify_all()  # the waiting thread sleeps too long now

    def armed_at(self, key: str) -> float | None:
        with self._cond:
            return self._armed.get(key)

    def take_due(self, now: float) -> list[str]:
        """The keys whose deadline is before `now`, disarmed, earliest first."""
        due: list[str] = []
        with self._cond:
            while self._heap and self._heap[0][0] < now:
                at, key = heapq.heappop(self._heap)
                if self._armed.get(key) != at:
                    continue  # superseded by an earlier arm, already taken
                del self._armed[key]
                due.append(key)
        return due

    def wait(self, monotonic: Callable[[], float], stop: threading.Event) -> None:
        """Sleep until the earliest deadline has passed, an earlier one is armed, or `wake`."""
        with self._cond:
            if stop.is_set():
                return
            timeout = None
            if self._heap:
                timeout = max(self._heap[0][0] - monotonic(), 0.0) + SLACK_SECONDS
            self._cond.wait(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
