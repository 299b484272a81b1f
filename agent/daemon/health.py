"""The agent's health as probes see it: alive (liveness) and connected (readiness).

Healthy means the inspection loop is alive and its last inspection succeeded recently
("recently": within `stale_after`, a few rescan intervals, since the loop inspects at least
once per rescan interval even while disconnected). A coordinator outage is not the agent's
illness: restarting the agent would not fix it, so it only makes the agent not ready.
`HealthState` is shared by the event loop (writer) and the HTTP thread (reader), so it
locks; `judge` is the pure decision.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HealthFacts:
    """What the loop last recorded; times are monotonic seconds, `*_at_wall` UTC."""

    started: float
    last_success: float | None
    last_failure: str | None
    connected: bool
    connection_changed_at_wall: datetime.datetime
    last_success_at_wall: datetime.datetime | None
    disconnect_reason: str


@dataclass(frozen=True)
class HealthVerdict:
    healthy: bool
    ready: bool
    reason: str


def judge(facts: HealthFacts, now: float, stale_after: float) -> HealthVerdict:
    """Liveness and readiness from `facts` at monotonic `now`."""
    if facts.last_failure is not None:
        healthy, reason = False, f"last inspection failed: {facts.last_failure}"
    elif facts.last_success is None:
        healthy = now - facts.started <= stale_after
        reason = "first inspection running" if healthy else "no inspection has finished"
    elif now - facts.last_success > stale_after:
        healthy = False
        reason = f"no inspection for {now - facts.last_success:.0f}s (limit {stale_after:.0f}s)"
    else:
        healthy, reason = True, "inspections succeed"
    return HealthVerdict(healthy=healthy, ready=facts.connected, reason=reason)


def _iso(moment: datetime.datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


class HealthState:
    """Thread-safe record of inspections and the connection, with the verdict on demand."""

    def __init__(
        self,
        *,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], datetime.datetime],
        stale_after: float,
    ) -> None:
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._stale_after = stale_after
        self._facts = HealthFacts(
            started=monotonic(),
            last_success=None,
            last_failure=None,
            connected=False,
            connection_changed_at_wall=wall_clock(),
            last_success_at_wall=None,
            disconnect_reason="not connected yet",
        )

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self._facts = dataclasses.replace(self._facts, **changes)

    def set_stale_after(self, seconds: float) -> None:
        with self._lock:
            self._stale_after = seconds

    def inspection_succeeded(self) -> None:
        self._update(
            last_success=self._monotonic(),
            last_success_at_wall=self._wall_clock(),
            last_failure=None,
        )

    def inspection_failed(self, reason: str) -> None:
        self._update(last_failure=reason)

    def connection(self, connected: bool, reason: str = "") -> None:
        """Record the connection state; `since` moves only when the state changes, the
        reason of being disconnected is always the latest."""
        with self._lock:
            changed = self._facts.connected != connected
        if changed:
            self._update(connected=connected, connection_changed_at_wall=self._wall_clock())
        self._update(disconnect_reason="" if connected else reason)

    def verdict(self) -> HealthVerdict:
        with self._lock:
            facts, stale_after = self._facts, self._stale_after
        return judge(facts, self._monotonic(), stale_after)

    def document(self) -> dict[str, object]:
        """The JSON body of /healthz and /readyz."""
        with self._lock:
            facts, stale_after = self._facts, self._stale_after
        verdict = judge(facts, self._monotonic(), stale_after)
        body: dict[str, object] = {
            "healthy": verdict.healthy,
            "reason": verdict.reason,
            "connected": facts.connected,
            "since": _iso(facts.connection_changed_at_wall),
            "lastInspection": _iso(facts.last_success_at_wall),
        }
        if not facts.connected:
            body["disconnectReason"] = facts.disconnect_reason
        return body
