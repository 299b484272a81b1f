"""The health verdict: alive while inspections succeed recently, ready while connected."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from agent.daemon.health import HealthFacts, HealthState, judge

T0 = datetime.datetime(2026, 11, 29, 23, 0, tzinfo=datetime.UTC)


def facts(**changes: Any) -> HealthFacts:
    base = HealthFacts(
        started=100.0,
        last_success=None,
        last_failure=None,
        connected=False,
        connection_changed_at_wall=T0,
        last_success_at_wall=None,
        disconnect_reason="not connected yet",
    )
    return dataclasses.replace(base, **changes)


def test_verdicts() -> None:
    assert judge(facts(), now=110.0, stale_after=60.0).healthy  # first inspection running
    assert not judge(facts(), now=200.0, stale_after=60.0).healthy
    recent = facts(last_success=150.0, connected=True)
    assert judge(recent, now=200.0, stale_after=60.0).healthy
    assert judge(recent, now=200.0, stale_after=60.0).ready
    stale = judge(recent, now=300.0, stale_after=60.0)
    assert (stale.healthy, stale.reason) == (False, "no inspection for 150s (limit 60s)")
    failed = judge(facts(last_success=150.0, last_failure="boom"), now=151.0, stale_after=60.0)
    assert (failed.healthy, failed.reason) == (False, "last inspection failed: boom")


def test_the_document_says_connected_or_not_and_since_when() -> None:
    now = [10.0]
    wall = [T0]
    state = HealthState(monotonic=lambda: now[0], wall_clock=lambda: wall[0], stale_after=60.0)
    state.connection(False, "coordinator unreachable: refused")
    assert state.document() == {
        "healthy": True,
        "reason": "first inspection running",
        "connected": False,
        "since": "2026-11-29T23:00:00Z",
        "lastInspection": None,
        "disconnectReason": "coordinator unreachable: refused",
    }
    wall[0] = T0 + datetime.timedelta(seconds=5)
    state.inspection_succeeded()
    state.connection(True)
    wall[0] = T0 + datetime.timedelta(seconds=9)
    state.connection(True)  # still connected: `since` stays
    document = state.document()
    assert (document["connected"], document["since"]) == (True, "2026-11-29T23:00:05Z")
    assert document["lastInspection"] == "2026-11-29T23:00:05Z"
    assert "disconnectReason" not in document
