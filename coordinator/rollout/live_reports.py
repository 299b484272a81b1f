"""The agents' live reports, as the rollout reads them: which nodes' GPUs serve nothing.

The live-node registry (coordinator/live_nodes/streams/registry.py) holds each agent's latest
report; the rollout reads it for the nodes of a pass (`RolloutGatherer`, into
`Reads.live_reports`) to find the driverless ones (gpuctl/rollout/input/driverless.py), which
start without waiting for a maxUnavailable slot. `DriverlessWatch` asks for a pass when a
node's report turns driverless or stops being so: a report changes for many reasons, and a
pass for each would cost a 5,000-node fleet a pass per report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from gpuctl.rollout.input.driverless import LiveReport, driverless

Listener = Callable[[str], None]


class LiveReports(Protocol):
    """What the rollout reads of the live-node registry."""

    def latest_report(self, node: str) -> LiveReport | None: ...

    def subscribe(self, listener: Listener) -> None: ...

    def unsubscribe(self, listener: Listener) -> None: ...


class DriverlessWatch:
    """Calls `changed()` when a node's latest report turns driverless, or stops being so."""

    def __init__(self, reports: LiveReports, changed: Callable[[], None]) -> None:
        self._reports = reports
        self._changed = changed
        self._lock = threading.Lock()
        self._driverless: set[str] = set()
        reports.subscribe(self.reported)

    def close(self) -> None:
        """No more passes asked for: the controller stopped (its leadership ended); the
        registry outlives it, and the next term's controller subscribes its own watch."""
        self._reports.unsubscribe(self.reported)

    def reported(self, node: str) -> None:
        latest = self._reports.latest_report(node)
        now = latest is not None and driverless(latest[1], latest[0], latest[0])
        with self._lock:
            before = node in self._driverless
            if now:
                self._driverless.add(node)
            else:
                self._driverless.discard(node)
        if now != before:
            self._changed()
