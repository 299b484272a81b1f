"""Is a node's report the truth now? A pure function of a record, the clock and the bound.

A report counts only while the agent was heard from (report or heartbeat) within the freshness
bound and its heartbeats confirm that the report we hold is its latest. Otherwise the node's
state is unknown, and unknown is never safe.
"""

from __future__ import annotations

from coordinator.live_nodes.node_record import NodeRecord
from gpuctl.common.unload_rule import NO_REPORT


def is_fresh(record: NodeRecord | None, now: float, bound_seconds: float) -> bool:
    return not staleness(record, now, bound_seconds)


def staleness(record: NodeRecord | None, now: float, bound_seconds: float) -> str:
    """Why a record is not fresh, in words ("" when it is)."""
    if record is None or record.report is None or record.last_heard is None:
        return NO_REPORT
    if not record.in_sync:
        return "the agent's latest report was not received"
    silent = now - record.last_heard
    if silent > bound_seconds:
        return f"agent report is stale (agent last heard {silent:.0f}s ago)"
    return ""
