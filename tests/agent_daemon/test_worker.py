"""The inspection worker: inspections never overlap, piled-up work is answered at once, and
a Welcome's nonsense intervals fall back to the agent's defaults."""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path

from agent.daemon.session import intervals_from_welcome
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.rpc.grpc_client import ClientTransport
from testbed.fakehost import FakeHost
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import NODE, agent_config, running_agent, seconds, welcome


class SlowInspector:
    """Takes 50 ms per inspection and records how many ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.count = 0

    def __call__(self, now: datetime.datetime) -> pb.NodeReport:
        with self._lock:
            self.running += 1
            self.count += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.05)
        with self._lock:
            self.running -= 1
        report = pb.NodeReport(node_name=NODE, kernel_release="6.8.0-60-generic")
        report.observed_at.FromDatetime(now)
        return report


def test_inspections_never_overlap_and_requests_that_piled_up_share_one(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    inspector = SlowInspector()
    coordinator = make_coordinator(welcome(rescan=0.01))
    config = agent_config(host.root, token_file, ClientTransport(coordinator.target, insecure=True))
    with running_agent(config, inspect=inspector):
        coordinator.wait_reports(1)
        for number in range(10):
            coordinator.send_inspect(f"r-{number}")
        reports = coordinator.wait_reports(11)
        time.sleep(0.2)
    assert inspector.most_at_once == 1
    answers = [r for r in reports if r.trigger == api.ReportUpdate.REQUESTED]
    assert [a.request_id for a in answers] == [f"r-{n}" for n in range(10)]
    assert [r.sequence for r in reports] == list(range(1, 12))
    # Ten requests arriving within a few ms did not take ten inspections each after the other.
    distinct = {a.report.observed_at.ToDatetime() for a in answers}
    assert len(distinct) < 10


def test_nonsense_welcome_intervals_fall_back_to_the_defaults() -> None:
    negative = api.Welcome(
        heartbeat_interval=seconds(-5), rescan_interval=seconds(0), max_reports_per_minute=6
    )
    intervals = intervals_from_welcome(negative, default_heartbeat=30.0, default_rescan=300.0)
    assert (intervals.heartbeat, intervals.rescan, intervals.max_reports_per_minute) == (
        30.0,
        300.0,
        6,
    )
    given = intervals_from_welcome(
        welcome(heartbeat=2.5, rescan=60), default_heartbeat=30.0, default_rescan=300.0
    )
    assert (given.heartbeat, given.rescan) == (2.5, 60.0)
