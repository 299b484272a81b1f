"""The registry's records and their freshness."""

from __future__ import annotations

from coordinator.live_nodes.streams.freshness import is_fresh, staleness
from coordinator.live_nodes.streams.node_record import Session
from coordinator.live_nodes.streams.registry import Registry
from testbed.agent_client import OPEN_CLIENTS, sample_report
from tests.support.clock import ManualClock

BOUND = 30.0


def _registry() -> tuple[Registry, ManualClock, list[str]]:
    clock = ManualClock()
    registry = Registry(clock, clock.wall)
    announced: list[str] = []
    registry.subscribe(announced.append)
    return registry, clock, announced


def test_a_report_is_fresh_while_heartbeats_confirm_it() -> None:
    registry, clock, announced = _registry()
    registry.connected("n1", 1, "v1", "boot")
    assert not is_fresh(registry.get("n1"), clock(), BOUND)
    assert registry.reported("n1", 1, sample_report("n1"), 1)
    assert is_fresh(registry.get("n1"), clock(), BOUND)
    clock.advance(25)
    assert registry.heard("n1", 1, last_sequence=1)
    clock.advance(25)
    assert is_fresh(registry.get("n1"), clock(), BOUND)
    clock.advance(10)
    record = registry.get("n1")
    assert not is_fresh(record, clock(), BOUND)
    assert staleness(record, clock(), BOUND) == ("agent report is stale (agent last heard 35s ago)")
    assert announced == ["n1", "n1"]  # connect and report; heartbeats announce nothing


def test_a_heartbeat_for_a_report_we_do_not_hold_makes_the_node_unknown() -> None:
    registry, clock, _ = _registry()
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, sample_report("n1"), 1)
    assert not registry.heard("n1", 1, last_sequence=2)
    record = registry.get("n1")
    assert not is_fresh(record, clock(), BOUND)
    assert staleness(record, clock(), BOUND) == "the agent's latest report was not received"
    registry.reported("n1", 1, sample_report("n1"), 3)
    registry.dropped("n1", 1)
    assert not is_fresh(registry.get("n1"), clock(), BOUND)


def test_an_old_stream_cannot_touch_the_newer_ones_record() -> None:
    registry, _, _ = _registry()
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, sample_report("n1"), 1)
    registry.connected("n1", 2, "v2", "boot")
    assert not registry.reported("n1", 1, sample_report("n1", (OPEN_CLIENTS,)), 2)
    registry.disconnected("n1", 1)
    record = registry.get("n1")
    assert record is not None
    assert (record.session, record.agent_version) == (Session.CONNECTED, "v2")
    assert record.report == sample_report("n1")  # kept, but not confirmed by the new stream
    assert not record.in_sync


def test_disconnecting_keeps_what_was_known() -> None:
    registry, _, _ = _registry()
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, sample_report("n1"), 1, answered_request="req-1")
    registry.disconnected("n1", 1)
    record = registry.get("n1")
    assert record is not None
    assert record.session is Session.DISCONNECTED
    assert record.report == sample_report("n1")
    assert record.answered_request == "req-1"
    registry.inspect_failed("n1", "req-2", "agent not connected")
    record = registry.get("n1")
    assert record is not None
    assert (record.answered_request, record.inspect_error) == ("req-2", "agent not connected")
