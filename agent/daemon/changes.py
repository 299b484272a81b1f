"""What counts as a change worth sending, and how many unrequested reports a minute may go.

A report is "changed" when it differs from the last one sent on this stream in anything but
`observed_at`: an unchanged rescan sends nothing (heartbeats keep the session fresh). The
coordinator drops unrequested reports beyond Welcome.max_reports_per_minute, so the agent
holds a change back until the window has room rather than have it dropped. Pure.
"""

from __future__ import annotations

from collections import deque

from gpuctl.api.v1alpha1 import node_report_pb2 as pb

WINDOW_SECONDS = 60.0


def without_timestamp(report: pb.NodeReport) -> bytes:
    """The report's deterministic serialization with `observed_at` cleared."""
    copy = pb.NodeReport()
    copy.CopyFrom(report)
    copy.ClearField("observed_at")
    return copy.SerializeToString(deterministic=True)


def report_changed(last_sent: pb.NodeReport | None, current: pb.NodeReport) -> bool:
    """True when `current` says something `last_sent` did not (None: nothing sent yet)."""
    if last_sent is None:
        return True
    return without_timestamp(last_sent) != without_timestamp(current)


class ReportRate:
    """Sliding one-minute window of the reports sent on a stream (monotonic seconds).

    Every report counts (the coordinator may count requested ones too); only unrequested
    ones wait for room."""

    def __init__(self, max_per_minute: int) -> None:
        # 0: the coordinator set no limit.
        self.max_per_minute = max_per_minute
        self._sent: deque[float] = deque()

    def _forget_before(self, now: float) -> None:
        while self._sent and self._sent[0] <= now - WINDOW_SECONDS:
            self._sent.popleft()

    def wait_before_send(self, now: float) -> float:
        """Seconds until an unrequested report may go (0: now)."""
        if self.max_per_minute <= 0:
            return 0.0
        self._forget_before(now)
        if len(self._sent) < self.max_per_minute:
            return 0.0
        return self._sent[0] + WINDOW_SECONDS - now

    def record(self, now: float) -> None:
        """A report was sent at `now`."""
        self._sent.append(now)
