"""The coordinator's health as kubelet's probes see it: alive (`/healthz`) and ready (`/readyz`).

Liveness is about the process's own loops, not about leading: each loop (the Lease loop, the
reconcile and rollout workers, the agents' event loop) `beat`s at least once per `within`
seconds while it runs and `rest`s when it ends on purpose. A loop whose beat is overdue is
wedged (a pass that never returns, a blocked event loop, a thread that died): `/healthz`
fails and kubelet restarts the Pod. A standby only runs the Lease loop, so it is alive as long
as that loop turns.

Readiness is a separate verdict the coordinator computes (Coordinator.readiness): a standby
that reaches the API server and reads the Lease is ready to lead; the leader is ready once its
caches have listed what the API server holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """One probe's answer: ok or not, and why (shown in the response body)."""

    ok: bool
    reason: str


class Liveness:
    """Heartbeats of the process's loops; a loop overdue is wedged."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._due: dict[str, float] = {}

    def beat(self, loop: str, within: float) -> None:
        """`loop` is turning; it promises its next beat (or `rest`) within `within` seconds."""
        with self._lock:
            self._due[loop] = self._monotonic() + within

    def rest(self, loop: str) -> None:
        """`loop` ended on purpose (stop, leadership lost): no beat is owed any more."""
        with self._lock:
            self._due.pop(loop, None)

    def verdict(self) -> Verdict:
        now = self._monotonic()
        with self._lock:
            overdue = sorted(
                f"{loop} ({now - due:.0f}s overdue)" for loop, due in self._due.items() if now > due
            )
            running = sorted(self._due)
        if overdue:
            return Verdict(False, "wedged: " + ", ".join(overdue))
        return Verdict(True, "turning: " + (", ".join(running) or "no loop running"))


@dataclass(frozen=True)
class Heartbeat:
    """One loop's beats (a no-op without a Liveness: tests and tools that run loops bare)."""

    liveness: Liveness | None
    loop: str
    within: float

    def beat(self) -> None:
        if self.liveness is not None:
            self.liveness.beat(self.loop, self.within)

    def rest(self) -> None:
        if self.liveness is not None:
            self.liveness.rest(self.loop)


NO_HEARTBEAT = Heartbeat(None, "", 0.0)
