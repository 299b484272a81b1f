"""The registry's records, freshness, and agent reports as the guard's blocker source."""

from __future__ import annotations

from coordinator.drivers.guard import Blocker, ResourceClaimSource, decide_unload
from coordinator.live_nodes.freshness import is_fresh, staleness
from coordinator.live_nodes.guard_source import LiveReportSource, report_blockers
from coordinator.live_nodes.node_record import Session
from coordinator.live_nodes.registry import Registry
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from tests.support.agent_client import OPEN_CLIENTS, sample_report
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


def test_report_blockers_per_targeted_node() -> None:
    registry, clock, _ = _registry()
    for stream, node in enumerate(("busy", "idle", "stale"), start=1):
        registry.connected(node, stream, "v1", "boot")
    registry.reported("busy", 1, sample_report("busy", (OPEN_CLIENTS,)), 1)
    registry.reported("idle", 2, sample_report("idle"), 1)
    registry.reported("stale", 3, sample_report("stale"), 1)
    clock.advance(BOUND + 1)
    registry.heard("busy", 1, 1)
    registry.heard("idle", 2, 1)
    records = {r.node: r for r in registry.records()}
    targets = frozenset({"busy", "idle", "stale", "never"})
    assert report_blockers(records, targets, clock(), BOUND) == [
        Blocker(
            "busy",
            "OPEN_CLIENTS",
            "node busy: 1 process holds 0000:03:00.0 open: pid 42 (ollama) (OPEN_CLIENTS)",
            "agents",
        ),
        Blocker(
            "never",
            "NodeStateUnknown",
            "node never: no agent report (unknown is never safe)",
            "agents",
        ),
        Blocker(
            "stale",
            "NodeStateUnknown",
            "node stale: agent report is stale (agent last heard 31s ago) (unknown is never safe)",
            "agents",
        ),
    ]
    assert report_blockers(records, frozenset({"idle"}), clock(), BOUND) == []


def test_an_unknown_blocker_reason_still_blocks() -> None:
    registry, clock, _ = _registry()
    report = report_pb.NodeReport(node_name="n1")
    report.blockers.add(reason=42)
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, report, 1)
    records = {r.node: r for r in registry.records()}
    [blocker] = report_blockers(records, frozenset({"n1"}), clock(), BOUND)
    assert blocker.reason == "REASON_42"


def test_the_guard_combines_claims_and_agent_reports() -> None:
    registry, clock, _ = _registry()
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, sample_report("n1"), 1)
    source = LiveReportSource(registry, BOUND, clock)
    claims = ResourceClaimSource((), ())
    assert decide_unload({"n1"}, [claims, source]).allowed
    clock.advance(BOUND + 1)
    decision = decide_unload({"n1"}, [claims, source])
    assert not decision.allowed
    assert [b.reason for b in decision.blockers] == ["NodeStateUnknown"]


def _held_by(node: str, *holders: str) -> report_pb.NodeReport:
    """A report of xe held by `holders` (the backport's xe_compat), with an open client too."""
    report = sample_report(node, (OPEN_CLIENTS,))
    report.module.holders[:] = list(holders)
    report.blockers.add(
        reason=report_pb.Blocker.MODULE_HOLDERS,
        message=f"xe is held by {', '.join(holders)}: unload them first",
    )
    return report


def test_holders_block_listed_in_modules_loading_order_or_not() -> None:
    registry, clock, _ = _registry()
    registry.connected("n1", 1, "v1", "boot")
    registry.connected("n2", 2, "v1", "boot")
    registry.reported("n1", 1, _held_by("n1", "xe_compat"), 1)
    registry.reported("n2", 2, _held_by("n2", "xe_compat", "kvmgt"), 1)
    records = {r.node: r for r in registry.records()}
    both = frozenset({"n1", "n2"})

    def reasons(unloaded_with: list[str]) -> list[tuple[str | None, str]]:
        return [
            (b.node, b.reason)
            for b in report_blockers(records, both, clock(), BOUND, unloaded_with)
        ]

    every = [
        ("n1", "OPEN_CLIENTS"),
        ("n1", "MODULE_HOLDERS"),
        ("n2", "OPEN_CLIENTS"),
        ("n2", "MODULE_HOLDERS"),
    ]
    assert reasons(["xe_compat"]) == every
    left = report_blockers(records, frozenset({"n2"}), clock(), BOUND, ["xe_compat"])[-1]
    assert left.message.startswith(
        "node n2: xe is held by xe_compat, kvmgt: KMM removes xe first and modulesLoadingOrder's "
        "xe_compat only after it"
    )
    assert reasons([]) == [
        ("n1", "OPEN_CLIENTS"),
        ("n1", "MODULE_HOLDERS"),
        ("n2", "OPEN_CLIENTS"),
        ("n2", "MODULE_HOLDERS"),
    ]


def test_idle_vfs_block_the_guard_nothing_disables_them_around_a_deletion() -> None:
    registry, clock, _ = _registry()
    report = sample_report("n1")
    pf, vf = report.devices
    vf.driver = "xe"  # idle on the host: preparation could disable it, but none happens here
    listed = report_pb.VirtualFunction(pci_address=vf.pci_address, driver="xe")
    pf.sriov.CopyFrom(report_pb.Sriov(num_vfs=1, vfs=[listed]))
    report.blockers.add(
        reason=report_pb.Blocker.ACTIVE_VFS,
        message="1 VF enabled",
        pci_address=pf.pci_address,
    )
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, report, 1)
    records = {r.node: r for r in registry.records()}
    [blocker] = report_blockers(records, frozenset({"n1"}), clock(), BOUND)
    assert (blocker.reason, blocker.message) == ("ACTIVE_VFS", "node n1: 1 VF enabled (ACTIVE_VFS)")


def test_the_guard_passes_the_unload_list_to_the_agent_source_which_still_refuses() -> None:
    registry, clock, _ = _registry()
    registry.connected("n1", 1, "v1", "boot")
    report = _held_by("n1", "xe_compat")
    del report.blockers[0]  # the open client: only the holder is left
    registry.reported("n1", 1, report, 1)
    source = LiveReportSource(registry, BOUND, clock)
    listed = decide_unload({"n1"}, [source], ["xe_compat", "drm_buddy"])
    assert not listed.allowed
    assert "KMM removes xe first" in listed.blockers[0].message
    refused = decide_unload({"n1"}, [source])
    assert [b.reason for b in refused.blockers] == ["MODULE_HOLDERS"]
