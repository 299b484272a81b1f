"""PrepareRequest and RestoreRequest over real gRPC: answered on the stream with the
request's id, run on the inspection worker (never during an inspection, never two at once),
and requests that make no sense get answers saying so while the stream stays up."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agent.__main__ import build_parser
from agent.daemon.flags import config_from_args
from agent.daemon.node_actions import NO_REQUEST_ID, NodeActionJob
from agent.daemon.runner import AgentDaemon
from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.rpc.grpc_client import ClientTransport
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B70_PFS, two_pro_b70_with_vfs
from tests.agent.fake_kernel import FakeKernel
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import NODE, agent_config, running_agent, welcome


def prepare_request(request_id: str, module: str = "xe") -> api.CoordinatorMessage:
    return api.CoordinatorMessage(
        prepare=api.PrepareRequest(
            request_id=request_id, module_name=module, allow_unbind=True, allow_disable_vfs=True
        )
    )


def restore_request(request_id: str, changes: list[api.NodeChange]) -> api.CoordinatorMessage:
    return api.CoordinatorMessage(
        restore=api.RestoreRequest(request_id=request_id, changes=changes)
    )


def vf_counts(report: pb.NodeReport) -> dict[str, int]:
    return {d.pci_address: d.sriov.num_vfs for d in report.devices if d.role == pb.Device.PHYSICAL}


def test_prepare_and_restore_are_answered_by_id_and_the_node_report_follows(
    tmp_path: Path, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    host = two_pro_b70_with_vfs(tmp_path / "b70")
    kernel = FakeKernel(host)
    coordinator = make_coordinator(welcome())
    config = agent_config(host.root, token_file, ClientTransport(coordinator.target, insecure=True))
    with running_agent(config, writer=kernel):
        coordinator.wait_reports(1)
        coordinator.send(prepare_request("prepare-1"))
        prepared = coordinator.wait_answer("prepare_result", "prepare-1").prepare_result
        assert (prepared.ready, prepared.error, list(prepared.blockers)) == (True, "", [])
        assert [c.WhichOneof("kind") for c in prepared.changes] == [
            "disabled_vfs",
            "disabled_vfs",
            "unbound",
            "unbound",
        ]
        assert vf_counts(prepared.report) == dict.fromkeys(B70_PFS, 0)
        # Without udev, the agent itself reports the node it changed.
        after = coordinator.wait_reports(2)[-1]
        assert after.trigger == api.ReportUpdate.DEVICE_EVENT
        assert vf_counts(after.report) == dict.fromkeys(B70_PFS, 0)

        coordinator.send(restore_request("restore-1", list(prepared.changes)))
        restored = coordinator.wait_answer("restore_result", "restore-1").restore_result
        assert list(restored.errors) == []
        assert list(restored.restored) == list(reversed(prepared.changes))
        assert vf_counts(restored.report) == dict.fromkeys(B70_PFS, 4)
        assert {d.driver for d in restored.report.devices} == {"xe"}


def test_requests_that_make_no_sense_get_answers_and_the_stream_stays_up(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    kernel = FakeKernel(host)
    coordinator = make_coordinator(welcome())
    config = agent_config(host.root, token_file, ClientTransport(coordinator.target, insecure=True))
    with running_agent(config, writer=kernel) as agent:
        coordinator.wait_reports(1)
        coordinator.send(prepare_request("p-other", module="i915"))
        coordinator.send(prepare_request(""))
        coordinator.send(
            restore_request(
                "r-unknown",
                [
                    api.NodeChange(
                        unbound=api.UnboundFunction(pci_address="0000:99:00.0", driver="xe")
                    )
                ],
            )
        )
        other = coordinator.wait_answer("prepare_result", "p-other").prepare_result
        assert other.error == (
            "this agent manages the xe module; it cannot prepare an unload of 'i915'"
        )
        unknown = coordinator.wait_answer("restore_result", "r-unknown").restore_result
        assert list(unknown.errors) == [
            "undoing unbinding 0000:99:00.0 from xe: there is no PCI function 0000:99:00.0 on "
            "this node"
        ]
        coordinator.send_inspect("still-here")
        reports = coordinator.wait_reports(2)
        assert reports[-1].request_id == "still-here"
        # The request without an id was not answered (an answer without one closes the
        # stream at the real coordinator), only logged.
        answered = [
            getattr(m, kind).request_id
            for m in coordinator.streams[-1].messages
            if (kind := m.WhichOneof("body") or "") in ("prepare_result", "restore_result")
        ]
        assert sorted(answered) == ["p-other", "r-unknown"]
        logged = [r.getMessage() for r in agent.logs.records]
        assert NO_REQUEST_ID in logged
    assert kernel.writes == []
    assert len(coordinator.streams) == 1


def test_an_agent_without_a_writer_changes_nothing_and_says_so(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome())
    config = agent_config(host.root, token_file, ClientTransport(coordinator.target, insecure=True))
    with running_agent(config):
        coordinator.wait_reports(1)
        coordinator.send(prepare_request("p-1"))
        result = coordinator.wait_answer("prepare_result", "p-1").prepare_result
    assert (result.ready, list(result.changes)) == (False, [])
    assert (
        result.error == "this agent may not change the node (started without "
        "--allow-node-changes; chart value agent.allowNodeChanges): nothing was changed"
    )


# -- never overlapping --------------------------------------------------------------------


class Activity:
    """Time spans of inspections and sysfs writes, from whatever thread they ran on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans: list[tuple[float, float, str]] = []

    @contextmanager
    def span(self, what: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self.spans.append((start, time.monotonic(), what))

    def overlaps(self) -> list[tuple[str, str]]:
        with self._lock:
            spans = sorted(self.spans)
        found = []
        latest_end, latest = float("-inf"), ""
        for start, end, what in spans:
            if start < latest_end:
                found.append((latest, what))
            if end > latest_end:
                latest_end, latest = end, what
        return found


class SlowInspector:
    def __init__(self, host: FakeHost, activity: Activity) -> None:
        self.host, self.activity = host, activity

    def __call__(self, now: datetime.datetime) -> pb.NodeReport:
        with self.activity.span("inspect"):
            time.sleep(0.01)
            return inspect_node(self.host.root, node_name=NODE, now=now)


class SlowWriter:
    def __init__(self, kernel: FakeKernel, activity: Activity) -> None:
        self.kernel, self.activity = kernel, activity

    def write(self, relative: str, text: str) -> None:
        with self.activity.span(f"write {relative}"):
            time.sleep(0.01)
            self.kernel.write(relative, text)


def test_node_changes_never_overlap_an_inspection_or_each_other(
    tmp_path: Path, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    host = two_pro_b70_with_vfs(tmp_path / "b70")
    activity = Activity()
    coordinator = make_coordinator(welcome(rescan=0.01))
    config = agent_config(host.root, token_file, ClientTransport(coordinator.target, insecure=True))
    writer = SlowWriter(FakeKernel(host), activity)
    with running_agent(config, inspect=SlowInspector(host, activity), writer=writer):
        coordinator.wait_reports(1)
        coordinator.send(prepare_request("p-1"))
        coordinator.send_inspect("i-1")
        coordinator.send(prepare_request("p-2"))  # finds the node prepared already
        prepared = coordinator.wait_answer("prepare_result", "p-1").prepare_result
        coordinator.send(restore_request("r-1", list(prepared.changes)))
        coordinator.send_inspect("i-2")
        restored = coordinator.wait_answer("restore_result", "r-1").restore_result
        second = coordinator.wait_answer("prepare_result", "p-2").prepare_result
    assert len(prepared.changes) == 4
    assert (second.ready, list(second.changes)) == (True, [])
    assert list(restored.errors) == []
    writes = [what for _, _, what in activity.spans if what.startswith("write")]
    assert len(writes) == 8
    assert sum(1 for _, _, what in activity.spans if what == "inspect") > 5
    assert activity.overlaps() == []


def test_node_changes_are_off_unless_the_flag_allows_them(host: FakeHost) -> None:
    def config(*extra: str) -> bool:
        argv = ["run", "--coordinator", "127.0.0.1:1", "--host-root", str(host.root), *extra]
        return config_from_args(build_parser().parse_args(argv), NODE).allow_node_changes

    assert (config(), config("--allow-node-changes")) == (False, True)


def test_a_request_whose_stream_closed_before_it_ran_changes_nothing(
    host: FakeHost, token_file: Path
) -> None:
    kernel = FakeKernel(host)
    config = agent_config(host.root, token_file, ClientTransport("127.0.0.1:1", insecure=True))
    daemon = AgentDaemon(
        config,
        inspect=lambda now: inspect_node(host.root, node_name=NODE, now=now),
        agent_version="test",
        uniform=lambda low, high: low,
        event_source=None,
        writer=kernel,
    )
    job = NodeActionJob(generation=1, message=prepare_request("p-late"))

    async def run() -> None:
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            await daemon._run_node_action(asyncio.get_running_loop(), executor, job)

    asyncio.run(run())  # no stream is open: generation 1 has closed
    assert kernel.writes == []
    assert daemon.pending.take() is None  # not even a report is owed
