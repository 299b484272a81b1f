"""What the coordinator knows about each node now: the thread-safe hand-over point.

The gRPC sessions (in the server's event loop thread) write into it; the GPUNode mirror, the
inspect requests, the metrics and NodeService read immutable snapshots (`NodeRecord`,
coordinator/live_nodes/streams/node_record.py) from any thread. Every change that the GPUNode mirror
cares about (a report, the session opening or closing, an answered inspect request) is announced to
subscribers by node name; heartbeats (and dropped reports) only refresh `last_heard`/`in_sync` and
announce nothing to them. They are told only to heartbeat subscribers, which must be cheap (the
GPUNode mirror writes nothing unless the node's freshness changed, e.g. it is heard from again after
going stale).

A record is never dropped when a session ends: the last report stays, marked Disconnected,
and goes stale by the clock (see coordinator/live_nodes/streams/freshness.py).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime

from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

Listener = Callable[[str], None]


class Registry:
    """Thread-safe map node -> NodeRecord, with change announcements."""

    def __init__(self, monotonic: Callable[[], float], wall_clock: Callable[[], datetime]) -> None:
        self._monotonic = monotonic
        self._wall = wall_clock
        self._records: dict[str, NodeRecord] = {}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._heartbeat_listeners: list[Listener] = []
        # Reports accepted since start (a figure for metrics and benchmarks).
        self.reports_accepted = 0

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """`listener` is told of nothing more (a rollout controller whose leadership ended)."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def subscribe_heartbeats(self, listener: Listener) -> None:
        """`listener(node)` after every heartbeat or dropped report of a current stream."""
        with self._lock:
            self._heartbeat_listeners.append(listener)

    def _announce(self, node: str, *, heartbeat: bool = False) -> None:
        with self._lock:
            listeners = list(self._heartbeat_listeners if heartbeat else self._listeners)
        for listener in listeners:
            listener(node)

    def get(self, node: str) -> NodeRecord | None:
        with self._lock:
            return self._records.get(node)

    def latest_report(self, node: str) -> tuple[str, report_pb.NodeReport] | None:
        """The boot the node's agent opened its stream in and its latest report, when this
        stream has reported and none was missed (`in_sync`); None otherwise. The rollout reads
        it (coordinator/rollout/live_reports.py)."""
        with self._lock:
            record = self._records.get(node)
        if record is None or record.report is None or not record.in_sync:
            return None
        return record.boot_id, record.report

    def records(self) -> list[NodeRecord]:
        with self._lock:
            return list(self._records.values())

    def monotonic(self) -> float:
        return self._monotonic()

    def _current(self, node: str, stream_id: int) -> NodeRecord | None:
        record = self._records.get(node)
        if record is None or record.stream_id != stream_id:
            return None
        return record

    def connected(self, node: str, stream_id: int, agent_version: str, boot_id: str) -> None:
        """A new stream for `node` took over (any older stream no longer counts)."""
        with self._lock:
            record = self._records.get(node) or NodeRecord(node)
            now = self._monotonic()
            self._records[node] = dataclasses.replace(
                record,
                session=Session.CONNECTED,
                stream_id=stream_id,
                agent_version=agent_version,
                boot_id=boot_id,
                last_heard=now,
                connected_at=now,
                # Until this stream's first report arrives, what we hold is the old stream's.
                in_sync=False,
                report_sequence=0,
            )
        self._announce(node)

    def reported(
        self,
        node: str,
        stream_id: int,
        report: report_pb.NodeReport,
        sequence: int,
        answered_request: str | None = None,
    ) -> bool:
        """An accepted report; False when the stream is no longer the node's current one."""
        with self._lock:
            record = self._current(node, stream_id)
            if record is None:
                return False
            changes: dict[str, object] = {
                "report": report,
                "report_sequence": sequence,
                "report_received_at": self._wall(),
                "last_heard": self._monotonic(),
                "in_sync": True,
            }
            if answered_request is not None:
                changes["answered_request"] = answered_request
                changes["inspect_error"] = ""
            self._records[node] = dataclasses.replace(record, **changes)  # type: ignore[arg-type]
            self.reports_accepted += 1
        self._announce(node)
        return True

    def heard(self, node: str, stream_id: int, last_sequence: int) -> bool:
        """A heartbeat; True when the agent's latest report is the one we hold."""
        with self._lock:
            record = self._current(node, stream_id)
            if record is None:
                return False
            in_sync = record.report is not None and last_sequence == record.report_sequence
            self._records[node] = dataclasses.replace(
                record, last_heard=self._monotonic(), in_sync=in_sync
            )
        self._announce(node, heartbeat=True)
        return in_sync

    def dropped(self, node: str, stream_id: int) -> None:
        """A report was refused (rate limit): what we hold may no longer be the truth."""
        with self._lock:
            record = self._current(node, stream_id)
            if record is None:
                return
            self._records[node] = dataclasses.replace(
                record, last_heard=self._monotonic(), in_sync=False
            )
        self._announce(node, heartbeat=True)

    def disconnected(self, node: str, stream_id: int) -> None:
        """The stream ended; ignored when a newer stream already took over."""
        with self._lock:
            record = self._current(node, stream_id)
            if record is None or record.session is Session.DISCONNECTED:
                return
            self._records[node] = dataclasses.replace(record, session=Session.DISCONNECTED)
        self._announce(node)

    def inspect_failed(self, node: str, request_id: str, why: str) -> None:
        """A GPUNode inspect request that could not be answered; the reason is its answer."""
        with self._lock:
            record = self._records.get(node) or NodeRecord(node)
            self._records[node] = dataclasses.replace(
                record, answered_request=request_id, inspect_error=why
            )
        self._announce(node)
