"""A hand-written uevent source: a pipe that is readable whenever events were pushed, like
the netlink socket pyudev reads, so the daemon's loop wiring runs unchanged in tests."""

from __future__ import annotations

import os

from agent.daemon.uevents import UEvent


class PipeSource:
    """A readable fd whenever `push` queued events, like a netlink socket."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._queued: list[UEvent] = []
        self.closed = False

    def push(self, *events: UEvent) -> None:
        self._queued.extend(events)
        os.write(self._write, b"x")

    def fileno(self) -> int:
        return self._read

    def drain(self) -> list[UEvent]:
        os.read(self._read, 4096)
        events, self._queued = self._queued, []
        return events

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
        self.closed = True
