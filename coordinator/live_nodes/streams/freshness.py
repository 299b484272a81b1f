"""Is a node's report the truth now? A pure function of a record, the clock and the bound.

A report counts only while the agent was heard from (report or heartbeat) within the freshness
bound and its heartbeats confirm that the report we hold is its latest. Otherwise the node's
state is unknown, and unknown is never safe. `freshness` says which, with a reason (the
GPUNode's Fresh condition) and words (the unload rule's blocker); `stale_at` says when a fresh
record turns stale by silence alone, which is when the GPUNode mirror looks again.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.live_nodes.streams.node_record import NodeRecord
from gpuctl.common.names import FreshReason
from gpuctl.common.unload_rule import NO_REPORT


@dataclass(frozen=True)
class Freshness:
    """The verdict on one record at one moment."""

    reason: FreshReason
    # Why the report is not the truth now, in words ("" when it is).
    why: str = ""
    # How long the agent had been silent (NO_HEARTBEAT only).
    silent_seconds: float | None = None

    @property
    def fresh(self) -> bool:
        return self.reason is FreshReason.AGENT_HEARD


FRESH = Freshness(FreshReason.AGENT_HEARD)


def freshness(record: NodeRecord | None, now: float, bound_seconds: float) -> Freshness:
    if record is None or record.report is None or record.last_heard is None:
        return Freshness(FreshReason.NO_REPORT, NO_REPORT)
    if not record.in_sync:
        return Freshness(
            FreshReason.REPORT_SUPERSEDED, "the agent's latest report was not received"
        )
    silent = now - record.last_heard
    if silent > bound_seconds:
        return Freshness(
            FreshReason.NO_HEARTBEAT,
            f"agent report is stale (agent last heard {silent:.0f}s ago)",
            silent,
        )
    return FRESH


def is_fresh(record: NodeRecord | None, now: float, bound_seconds: float) -> bool:
    return freshness(record, now, bound_seconds).fresh


def staleness(record: NodeRecord | None, now: float, bound_seconds: float) -> str:
    """Why a record is not fresh, in words ("" when it is)."""
    return freshness(record, now, bound_seconds).why


def stale_at(record: NodeRecord | None, bound_seconds: float) -> float | None:
    """The monotonic moment after which `record` is stale if nothing more is heard.

    None when silence is not what could end its freshness (no report, nothing heard yet).
    """
    if record is None or record.report is None or record.last_heard is None:
        return None
    return record.last_heard + bound_seconds
