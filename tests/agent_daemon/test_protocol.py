"""A coordinator that says odd things: the agent names the problem and stays up."""

from __future__ import annotations

import time
from pathlib import Path

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.rpc.grpc_client import ClientTransport
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import agent_config, running_agent, welcome


def plaintext(target: str) -> ClientTransport:
    return ClientTransport(target, insecure=True)


def test_hello_answered_with_something_else_than_welcome_is_a_protocol_error(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    odd = api.CoordinatorMessage(inspect=api.InspectRequest(request_id="too-early"))
    coordinator = make_coordinator(welcome(), answer_hello_with=odd)
    with running_agent(agent_config(host.root, token_file, plaintext(coordinator.target))) as agent:
        coordinator.wait_for("two attempts", lambda: len(agent.logs.reasons()) >= 2)
    assert agent.logs.reasons()[0] == (
        "protocol error: the coordinator answered Hello with inspect, not Welcome"
    )
    # Nothing was reported on a stream that never got its Welcome.
    assert all(not stream.reports() for stream in coordinator.streams)


def test_an_empty_answer_to_hello_is_a_protocol_error(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    # An empty message: no body at all.
    coordinator = make_coordinator(welcome(), answer_hello_with=api.CoordinatorMessage())
    config = agent_config(host.root, token_file, plaintext(coordinator.target))
    with running_agent(config) as agent:
        coordinator.wait_for("an attempt", agent.logs.reasons)
    assert agent.logs.reasons()[0] == (
        "protocol error: the coordinator answered Hello with an empty message, not Welcome"
    )


def test_a_request_this_agent_cannot_handle_is_ignored_and_the_stream_lives_on(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    """A request kind from a newer coordinator (a body this agent's API does not know) is
    logged and ignored; the agent keeps serving."""
    coordinator = make_coordinator(welcome())
    # Field 15 of CoordinatorMessage: unknown here, kept as an unknown field and sent on.
    newer = api.CoordinatorMessage.FromString(bytes([0x7A, 0x00]))
    with running_agent(agent_config(host.root, token_file, plaintext(coordinator.target))) as agent:
        coordinator.wait_reports(1)
        coordinator.send(newer)
        coordinator.send_inspect("after-newer")
        answer = coordinator.wait_reports(2)[1]
        ignored = [getattr(r, "kind", None) for r in agent.logs.records if hasattr(r, "kind")]
    assert (answer.request_id, answer.sequence) == ("after-newer", 2)
    assert ignored == ["(empty or unknown to this agent's API version)"]
    assert len(coordinator.streams) == 1


def test_a_later_welcome_changes_the_intervals(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(heartbeat=3600, rescan=3600))
    with running_agent(agent_config(host.root, token_file, plaintext(coordinator.target))):
        coordinator.wait_reports(1)
        host.add_vfs(B580, 1, driver="xe", first_drm_minor=1)
        time.sleep(0.3)
        stream = coordinator.streams[0]
        assert len(stream.reports()) == 1  # the hour-long rescan has not come
        coordinator.send(api.CoordinatorMessage(welcome=welcome(heartbeat=0.1, rescan=0.1)))
        update = coordinator.wait_reports(2)[1]
        coordinator.wait_for("a heartbeat", stream.heartbeats)
    assert (update.trigger, update.report.devices[0].sriov.num_vfs) == (api.ReportUpdate.RESCAN, 1)
