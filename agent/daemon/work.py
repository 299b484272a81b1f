"""What the next inspection is for: pending triggers, coalesced.

Inspections never overlap: one worker takes everything that piled up while the previous
inspection ran and answers all of it with one fresh report. A udev burst and a rescan that
land together become one inspection (a device event wins over a rescan as the trigger);
every InspectRequest keeps its own id, since each is answered by name. Stream-bound work
(the CONNECTED report, requests) carries the stream's generation, so work for a stream that
has since closed is dropped instead of leaking into the next one. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from gpuctl.api.v1alpha1 import agent_service_pb2 as api

Trigger: TypeAlias = api.ReportUpdate.Trigger.ValueType
DEVICE_EVENT: Trigger = api.ReportUpdate.DEVICE_EVENT
RESCAN: Trigger = api.ReportUpdate.RESCAN
# Unrequested triggers, strongest first.
_PRECEDENCE = (DEVICE_EVENT, RESCAN)


@dataclass(frozen=True)
class Batch:
    """One inspection's worth of work."""

    # The stream generations that still owe their first (CONNECTED) report.
    connected: tuple[int, ...] = ()
    # DEVICE_EVENT or RESCAN when the node may have changed, else None.
    change: Trigger | None = None
    # (stream generation, request id) in arrival order.
    requests: tuple[tuple[int, str], ...] = ()

    def requests_for(self, generation: int) -> list[str]:
        return [request_id for owner, request_id in self.requests if owner == generation]


@dataclass
class PendingWork:
    """Triggers waiting for the worker."""

    _connected: list[int] = field(default_factory=list)
    _change: Trigger | None = None
    _requests: list[tuple[int, str]] = field(default_factory=list)
    _local: bool = False

    def add_connected(self, generation: int) -> None:
        self._connected.append(generation)

    def add_change(self, trigger: Trigger) -> None:
        if self._change is None or _PRECEDENCE.index(trigger) < _PRECEDENCE.index(self._change):
            self._change = trigger

    def add_request(self, generation: int, request_id: str) -> None:
        self._requests.append((generation, request_id))

    def add_local(self) -> None:
        """An inspection for the agent's own health (startup), tied to no stream."""
        self._local = True

    def take(self) -> Batch | None:
        """Everything pending, cleared; None when nothing is."""
        if not (self._connected or self._change is not None or self._requests or self._local):
            return None
        batch = Batch(tuple(self._connected), self._change, tuple(self._requests))
        self._connected, self._change, self._requests, self._local = [], None, [], False
        return batch
