"""Wire an EventSource into the asyncio loop: no thread, no polling.

The loop watches the source's fd (`add_reader`); when it is readable, the waiting events are
drained, filtered (`uevents.is_relevant`) and fed to the Debouncer, and one timer at the
debounce deadline calls `on_change` once per burst.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.daemon.uevents import Debouncer, EventSource, is_relevant

log = logging.getLogger("agent.daemon.uevents")


class UeventWatcher:
    """Calls `on_change()` after each debounced burst of relevant events from `source`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        source: EventSource,
        debouncer: Debouncer,
        on_change: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._source = source
        self._debouncer = debouncer
        self._on_change = on_change
        self._timer: asyncio.TimerHandle | None = None
        self.relevant_events = 0
        self.ignored_events = 0

    def start(self) -> None:
        self._loop.add_reader(self._source.fileno(), self._readable)

    def stop(self) -> None:
        self._loop.remove_reader(self._source.fileno())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._source.close()

    def _readable(self) -> None:
        events = self._source.drain()
        relevant = [event for event in events if is_relevant(event)]
        self.ignored_events += len(events) - len(relevant)
        if not relevant:
            return
        self.relevant_events += len(relevant)
        first = relevant[0]
        log.debug(
            "uevent",
            extra={"action": first.action, "subsystem": first.subsystem, "count": len(relevant)},
        )
        deadline = self._debouncer.event(self._loop.time())
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(deadline, self._deadline_reached)

    def _deadline_reached(self) -> None:
        self._timer = None
        if self._debouncer.fire_if_due(self._loop.time()):
            self._on_change()
        elif self._debouncer.deadline is not None:
            self._timer = self._loop.call_at(self._debouncer.deadline, self._deadline_reached)
