"""What counts as a change (everything but observed_at) and the report rate window."""

from __future__ import annotations

from pathlib import Path

from agent.daemon.changes import ReportRate, report_changed
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost.scenarios import open_render_clients


def test_only_observed_at_is_ignored(tmp_path: Path) -> None:
    host = open_render_clients(tmp_path)
    first = host.inspect()
    later = host.inspect()
    later.observed_at.FromSeconds(first.observed_at.seconds + 60)
    assert not report_changed(first, later)
    assert report_changed(None, first)
    host.remove_process(2200)
    without_python = host.inspect()
    assert report_changed(first, without_python)
    assert report_changed(first, pb.NodeReport(node_name=first.node_name))


def test_no_limit_never_waits() -> None:
    rate = ReportRate(0)
    for second in range(100):
        rate.record(float(second) / 10)
    assert rate.wait_before_send(10.0) == 0.0


def test_a_full_window_waits_until_its_oldest_send_is_a_minute_old() -> None:
    rate = ReportRate(3)
    for moment in (100.0, 110.0, 120.0):
        assert rate.wait_before_send(moment) == 0.0
        rate.record(moment)
    assert rate.wait_before_send(130.0) == 30.0
    assert rate.wait_before_send(160.0) == 0.0
    rate.record(160.0)
    assert rate.wait_before_send(161.0) == 9.0
