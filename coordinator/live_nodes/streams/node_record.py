"""What the coordinator knows about one node: an immutable record, and its agent's session.

Plain values, so the pure readers (coordinator/live_nodes/streams/freshness.py,
coordinator/live_nodes/gpunodes/gpunode_status.py) import them without the thread-safe Registry that
holds and replaces them (coordinator/live_nodes/streams/registry.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb


class Session(Enum):
    CONNECTED = "Connected"
    DISCONNECTED = "Disconnected"


@dataclass(frozen=True)
class NodeRecord:
    """One node as the coordinator knows it. Immutable; the registry replaces it on change."""

    node: str
    session: Session = Session.DISCONNECTED
    stream_id: int = 0
    agent_version: str = ""
    boot_id: str = ""
    # The latest accepted report (never mutated), its sequence on its stream, and when it came.
    report: report_pb.NodeReport | None = None
    report_sequence: int = 0
    report_received_at: datetime | None = None
    # Monotonic time of the last message of any kind from the agent, and of its stream's start.
    last_heard: float | None = None
    connected_at: float | None = None
    # False when the agent has sent reports the coordinator did not accept (rate limit) or
    # did not see: the report above may then not be the agent's latest.
    in_sync: bool = False
    # The last GPUNode spec.inspectRequest id answered (by a report or by inspect_error).
    answered_request: str = ""
    inspect_error: str = ""
