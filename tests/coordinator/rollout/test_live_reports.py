"""coordinator/rollout/live_reports.py: a pass is asked for when a node's GPU turns
driverless or stops being so, not for every report; and the registry gives only a report it
knows to be the latest."""

from __future__ import annotations

import datetime

from coordinator.live_nodes.streams.registry import Registry
from coordinator.rollout.live_reports import DriverlessWatch
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

BOOT = "4d1f2b55-2f0e-4c1c-9d8b-8f3d7a3e2c10"


def gpu_report(state: report_pb.Module.State.ValueType, driver: str) -> report_pb.NodeReport:
    module = report_pb.Module(name="xe", state=state)
    report = report_pb.NodeReport(node_name="gpu-1", module=module)
    report.devices.add(pci_address="0000:03:00.0", vendor_id="8086", driver=driver)
    return report


def registry() -> Registry:
    return Registry(lambda: 1.0, lambda: datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC))


def test_a_pass_only_when_a_node_turns_driverless_or_back() -> None:
    reports = registry()
    passes: list[int] = []
    DriverlessWatch(reports, lambda: passes.append(1))
    reports.connected("gpu-1", 1, "0.9", BOOT)
    assert reports.latest_report("gpu-1") is None  # nothing reported on this stream yet
    reports.reported("gpu-1", 1, gpu_report(report_pb.Module.LIVE, "xe"), 1)
    reports.reported("gpu-1", 1, gpu_report(report_pb.Module.LIVE, "xe"), 2)
    assert passes == []
    bare = gpu_report(report_pb.Module.NOT_LOADED, "")
    reports.reported("gpu-1", 1, bare, 3)
    assert passes == [1]
    reports.reported("gpu-1", 1, bare, 4)
    assert passes == [1]
    assert reports.latest_report("gpu-1") == (BOOT, bare)
    reports.reported("gpu-1", 1, gpu_report(report_pb.Module.LIVE, "xe"), 5)
    assert passes == [1, 1]


def test_a_closed_watch_asks_for_nothing_more() -> None:
    """A controller whose leadership ended closes its watch: the registry, which outlives it,
    keeps no listener of it (a process leading again and again would pile them up)."""
    reports = registry()
    passes: list[int] = []
    watch = DriverlessWatch(reports, lambda: passes.append(1))
    watch.close()
    reports.connected("gpu-1", 1, "0.9", BOOT)
    reports.reported("gpu-1", 1, gpu_report(report_pb.Module.NOT_LOADED, ""), 1)
    assert passes == []
    watch.close()  # twice is harmless


def test_a_new_stream_before_its_first_report_gives_no_report() -> None:
    reports = registry()
    reports.connected("gpu-1", 1, "0.9", BOOT)
    reports.reported("gpu-1", 1, gpu_report(report_pb.Module.NOT_LOADED, ""), 1)
    # The old stream's report is not of the new stream's boot.
    reports.connected("gpu-1", 2, "0.9", "a-later-boot")
    assert reports.latest_report("gpu-1") is None
