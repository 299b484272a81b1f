"""Work queues of keys (GPUDriver names, node names) and the worker loop that drains one.

Change handlers `add` the key a change concerns; a `WorkQueue` holds each key at most once, so
a burst of changes to one object becomes one pass; `add_within` has a key taken no later
than a time (a burst of changes spread over a second or so is one pass; a wake-up a pass asked
for, a retry), and `add_after` at a time (the GPUNode mirror's write slots). `run_worker` is
the loop a controller runs in its own thread: take a key, make one pass over it, queue it
again within the delay the pass asked for (or `error_retry_seconds` when it raised; a pass due
sooner stands in for it), until `stop` is set. A worker may rest after each pass (`rest`):
the queue then hands out no key for a while, and the changes that come meanwhile are one pass.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable

from coordinator.health import NO_HEARTBEAT, Heartbeat

log = logging.getLogger(__name__)

# How long a worker waits for a key before looking at `stop` again.
POLL_SECONDS = 0.5


class WorkQueue:
    """Deduplicating queue of keys with delayed re-adds, for one worker thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ready: list[str] = []
        self._queued: set[str] = set()
        self._delayed: list[tuple[float, str]] = []
        # No key is handed out before this moment (rest).
        self._resting_until = -math.inf
        self._cond = threading.Condition()

    def now(self) -> float:
        """The queue's clock."""
        return self._clock()

    def rest(self, seconds: float) -> None:
        """Hand out no key for `seconds` from now; keys added meanwhile wait, each once."""
        with self._cond:
            self._resting_until = self._clock() + seconds

    def add(self, key: str) -> None:
        with self._cond:
            if key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def add_within(self, key: str, seconds: float) -> None:
        """Have `key` taken no later than `seconds` from now: nothing more while it is queued or
        due by then already, so a burst of changes within `seconds` is one pass."""
        with self._cond:
            if key in self._queued:
                return
            by = self._clock() + seconds
            if any(queued == key and due <= by for due, queued in self._delayed):
                return
            heapq.heappush(self._delayed, (by, key))
            self._cond.notify()

    def add_after(self, key: str, seconds: float) -> None:
        with self._cond:
            heapq.heappush(self._delayed, (self._clock() + seconds, key))
            self._cond.notify()

    def _promote_due(self) -> float | None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, key = heapq.heappop(self._delayed)
            if key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float) -> str | None:
        """The next key, or None after `timeout` seconds without one."""
        deadline = self._clock() + timeout
        with self._cond:
            while True:
                until_delayed = self._promote_due()
                resting = self._resting_until - self._clock()
                if self._ready and resting <= 0:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    return key
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return None
                wait = remaining if until_delayed is None else min(remaining, until_delayed)
                if self._ready:
                    wait = min(wait, resting)
                self._cond.wait(wait)


# One pass over a key: seconds until it wants another pass, or None when events suffice.
Pass = Callable[[str], float | None]
# How long the worker rests after a pass, given how long the pass took (seconds).
Rest = Callable[[float], float]


def no_rest(_pass_seconds: float) -> float:
    return 0.0


def run_worker(
    queue: WorkQueue,
    one_pass: Pass,
    stop: threading.Event,
    *,
    error_retry_seconds: float,
    failure: str,
    key_name: str,
    heartbeat: Heartbeat = NO_HEARTBEAT,
    rest: Rest = no_rest,
) -> None:
    """Take keys from `queue` and make `one_pass` over each until `stop` is set.

    A pass that raises is logged as `failure` (with the key under `key_name`) and tried again
    after `error_retry_seconds`; nothing is queued again once `stop` is set. The loop beats
    `heartbeat` before each wait and each pass, so a pass that never returns (or a dead
    thread) shows as overdue; it rests when `stop` ends it. After each pass the queue hands
    out no key for `rest(seconds the pass took)` (by the queue's clock).
    """
    while not stop.is_set():
        heartbeat.beat()
        key = queue.get(timeout=POLL_SECONDS)
        if key is None:
            continue
        heartbeat.beat()
        started = queue.now()
        try:
            again = one_pass(key)
        except Exception:
            log.exception(failure, extra={key_name: key})
            again = error_retry_seconds
        queue.rest(rest(queue.now() - started))
        if again is not None and not stop.is_set():
            # No later than asked: a pass already due sooner (a change during this one) makes
            # its own request, so a second pass at the same moment would decide nothing new.
            queue.add_within(key, again)
    heartbeat.rest()  # only on purpose: a loop that died mid-pass stays overdue
