"""One open stream to the coordinator, after its Welcome: what was sent, and sending.

A Session numbers its reports from 1, remembers the last report sent (what "changed" is
measured against), when it last wrote anything (heartbeats fill silences), and the report
rate. The event loop has two writers on a stream (the inspection worker and the heartbeat
timer) and grpc.aio allows one write at a time, so writes take a lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import grpc.aio

from agent.daemon.changes import ReportRate
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb

Trigger: TypeAlias = api.ReportUpdate.Trigger.ValueType
AgentCall: TypeAlias = grpc.aio.StreamStreamCall[api.AgentMessage, api.CoordinatorMessage]


@dataclass(frozen=True)
class Intervals:
    """What a Welcome asks for, with the agent's defaults where it asks nothing."""

    heartbeat: float
    rescan: float
    max_reports_per_minute: int


def intervals_from_welcome(
    welcome: api.Welcome, *, default_heartbeat: float, default_rescan: float
) -> Intervals:
    """A zero or negative duration (unset, or garbage) means "use the default"."""
    heartbeat = welcome.heartbeat_interval.ToTimedelta().total_seconds()
    rescan = welcome.rescan_interval.ToTimedelta().total_seconds()
    return Intervals(
        heartbeat=heartbeat if heartbeat > 0 else default_heartbeat,
        rescan=rescan if rescan > 0 else default_rescan,
        max_reports_per_minute=welcome.max_reports_per_minute,
    )


class Session:
    def __init__(
        self,
        generation: int,
        call: AgentCall,
        intervals: Intervals,
        monotonic: Callable[[], float],
    ) -> None:
        self.generation = generation
        self.call = call
        self.intervals = intervals
        self.rate = ReportRate(intervals.max_reports_per_minute)
        self.sequence = 0
        self.last_sent: pb.NodeReport | None = None
        self._monotonic = monotonic
        self.last_write = monotonic()
        self._write_lock = asyncio.Lock()
        # Set when `apply` changed the intervals, so a timer waiting on the old ones restarts.
        self.intervals_changed = asyncio.Event()

    def apply(self, intervals: Intervals) -> None:
        """A later Welcome on the same stream changes the intervals."""
        if intervals != self.intervals:
            self.intervals = intervals
            self.rate.max_per_minute = intervals.max_reports_per_minute
            self.intervals_changed.set()

    async def _write(self, message: api.AgentMessage) -> None:
        async with self._write_lock:
            await self.call.write(message)
            self.last_write = self._monotonic()

    async def send_report(
        self, report: pb.NodeReport, trigger: Trigger, request_id: str = ""
    ) -> int:
        """Send `report`; returns its sequence number."""
        async with self._write_lock:
            self.sequence += 1
            update = api.ReportUpdate(
                report=report, trigger=trigger, request_id=request_id, sequence=self.sequence
            )
            await self.call.write(api.AgentMessage(report=update))
            now = self._monotonic()
            self.last_write = now
            self.last_sent = report
            self.rate.record(now)
            return self.sequence

    async def send_answer(self, answer: api.AgentMessage) -> None:
        """Send the answer to a coordinator request (a PrepareResult, a RestoreResult)."""
        await self._write(answer)

    async def send_heartbeat(self) -> None:
        await self._write(api.AgentMessage(heartbeat=api.Heartbeat(last_sequence=self.sequence)))
