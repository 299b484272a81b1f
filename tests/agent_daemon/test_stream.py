"""The agent daemon against a FakeCoordinator over real gRPC on loopback, TLS by default."""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from agent.daemon.uevents import UEvent
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.rpc.grpc_client import ClientTransport
from gpuctl.rpc.grpc_errors import LOST_STATUS_DETAILS, LOST_STATUS_PHRASE
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import (
    AGENT_VERSION,
    NODE,
    TOKEN,
    Pki,
    agent_config,
    make_pki,
    rotate_token,
    running_agent,
    welcome,
)
from tests.agent_daemon.pipe_source import PipeSource

CONNECTED = api.ReportUpdate.CONNECTED
RESCAN = api.ReportUpdate.RESCAN
REQUESTED = api.ReportUpdate.REQUESTED
REJECTED = "UNAUTHENTICATED (the coordinator rejected the token): no valid bearer token"


def tls(target: str, pki: Pki) -> ClientTransport:
    return ClientTransport(target=target, ca_file=pki.ca_file)


def test_hello_then_welcome_then_the_first_report_with_the_bearer_token(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    host.write("proc/sys/kernel/random/boot_id", "6f0c2a4e-1b7d-4c55-9a3e-0d2b7c1e9f44\n")
    coordinator = make_coordinator(welcome(), pki=pki)
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))):
        (report,) = coordinator.wait_reports(1)
        stream = coordinator.streams[0]
    assert stream.metadata["authorization"] == f"Bearer {TOKEN}"
    hello = stream.messages[0]
    assert hello.WhichOneof("body") == "hello"
    assert (hello.hello.node_name, hello.hello.agent_version, hello.hello.boot_id) == (
        NODE,
        AGENT_VERSION,
        "6f0c2a4e-1b7d-4c55-9a3e-0d2b7c1e9f44",
    )
    assert stream.messages[1].report == report
    assert (report.trigger, report.sequence, report.request_id) == (CONNECTED, 1, "")
    assert report.report.node_name == NODE
    assert [device.pci_address for device in report.report.devices] == [B580]
    assert report.report.devices[0].sriov.num_vfs == 0
    # SIGTERM's path: the agent half-closed its stream, the server saw it end.
    coordinator.wait_for("the stream ended", lambda: stream.ended)


def test_changes_reach_the_coordinator_through_the_periodic_rescan(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(rescan=0.2), pki=pki)
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))):
        (first,) = coordinator.wait_reports(1)
        assert not first.report.devices[0].clients
        # A process opens the render node (which takes a reference on xe).
        host.write("sys/module/xe/refcnt", "1\n")
        host.add_process(4242, "ollama")
        host.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=42)
        # (A rescan may run between the writes, and report the change half made.)
        second = coordinator.wait_report_where(
            "ollama's client", lambda r: [c.pid for c in r.report.devices[0].clients] == [4242]
        )
        # Two VFs are enabled.
        host.add_vfs(B580, 2, driver="xe", first_drm_minor=1)
        third = coordinator.wait_report_where(
            "two VFs and their functions",
            lambda r: r.report.devices[0].sriov.num_vfs == 2 and len(r.report.devices) == 3,
        )
    assert second.trigger == RESCAN
    assert [(c.pid, c.command) for c in second.report.devices[0].clients] == [(4242, "ollama")]
    assert third.trigger == RESCAN
    assert first.sequence < second.sequence < third.sequence
    assert [d.pci_address for d in third.report.devices] == [
        B580,
        "0000:03:00.1",
        "0000:03:00.2",
    ]


def test_an_unchanged_rescan_sends_nothing_but_heartbeats_arrive(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(heartbeat=0.1, rescan=0.05), pki=pki)
    config = agent_config(host.root, token_file, tls(coordinator.target, pki))
    with running_agent(config) as agent:
        coordinator.wait_reports(1)
        stream = coordinator.streams[0]
        coordinator.wait_for("5 heartbeats", lambda: len(stream.heartbeats()) >= 5)
        rescans_before = agent.daemon.health.document()["lastInspection"]
        time.sleep(0.3)
        rescans_after = agent.daemon.health.document()["lastInspection"]
    # The rescans did run (the last inspection moved on), yet no report followed the first.
    assert rescans_after != rescans_before
    assert [r.sequence for r in stream.reports()] == [1]
    assert {h.last_sequence for h in stream.heartbeats()} == {1}


def test_an_inspect_request_is_answered_with_its_id_even_when_unchanged(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(), pki=pki)
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))):
        (first,) = coordinator.wait_reports(1)
        coordinator.send_inspect("check-7")
        answer = coordinator.wait_reports(2)[1]
        coordinator.send_inspect("check-8")
        again = coordinator.wait_reports(3)[2]
    assert (answer.trigger, answer.request_id, answer.sequence) == (REQUESTED, "check-7", 2)
    assert (again.trigger, again.request_id, again.sequence) == (REQUESTED, "check-8", 3)
    assert answer.report.devices == first.report.devices
    # Fresh inspections, not the first report repeated.
    assert answer.report.observed_at.ToDatetime() > first.report.observed_at.ToDatetime()


def test_a_restarted_coordinator_gets_a_new_stream_and_a_new_connected_report(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(), pki=pki)
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))) as agent:
        coordinator.wait_reports(1)
        coordinator.stop()
        coordinator.wait_for("the agent noticed", lambda: not agent.daemon.health.verdict().ready)
        # Rotated by kubelet while the coordinator was down: the next connect reads it.
        rotate_token(token_file, "rotated-token")
        coordinator.tokens["rotated-token"] = NODE
        coordinator.start()
        coordinator.wait_streams(2)
        (report,) = coordinator.wait_reports(1, stream_index=1)
        coordinator.wait_for("ready again", lambda: agent.daemon.health.verdict().ready)
    assert (report.trigger, report.sequence) == (CONNECTED, 1)
    assert coordinator.streams[1].metadata["authorization"] == "Bearer rotated-token"
    assert any(reason.startswith("stream ended: UNAVAILABLE") for reason in agent.logs.reasons())


def test_the_token_file_is_read_again_on_every_connect(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    token_file.write_text("stale-token\n")
    coordinator = make_coordinator(welcome(), pki=pki)
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))) as agent:
        # The refusal is sent before the coordinator reads Hello, so gRPC Python can lose its
        # words to a write that races it (grpc/grpc#36066): wait for an attempt that heard them.
        coordinator.wait_for("a refusal the agent heard", lambda: REJECTED in agent.logs.reasons())
        rotate_token(token_file, TOKEN)
        (report,) = coordinator.wait_reports(1)
        reasons = agent.logs.reasons()
    assert report.trigger == CONNECTED
    assert set(coordinator.refusals) == {(grpc.StatusCode.UNAUTHENTICATED, "no valid bearer token")}
    assert set(reasons) <= {REJECTED, f"{LOST_STATUS_PHRASE}: {LOST_STATUS_DETAILS}"}
    assert coordinator.streams[-1].metadata["authorization"] == f"Bearer {TOKEN}"


def test_a_token_for_another_node_is_logged_as_a_node_mismatch(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(), pki=pki, tokens={TOKEN: "gpu-node-2"})
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))) as agent:
        coordinator.wait_for("two refusals", lambda: len(coordinator.refusals) >= 2)
        reasons = agent.logs.reasons()
    assert reasons[0] == (
        'PERMISSION_DENIED "node mismatch" (the token is bound to another node): '
        "node mismatch: the token is bound to gpu-node-2, Hello names gpu-node-1"
    )


def test_a_wrong_ca_is_a_logged_tls_failure_and_the_agent_keeps_retrying(
    host: FakeHost, token_file: Path, pki: Pki, tmp_path: Path, make_coordinator: MakeCoordinator
) -> None:
    other = make_pki(tmp_path, "other-ca.pem")
    coordinator = make_coordinator(welcome(), pki=pki)
    config = agent_config(host.root, token_file, tls(coordinator.target, other))
    with running_agent(config) as agent:
        coordinator.wait_for("three failed attempts", lambda: len(agent.logs.reasons()) >= 3)
        assert agent.daemon.health.verdict().healthy
        assert not agent.daemon.health.verdict().ready
    assert all(r.startswith("TLS verification failed") for r in agent.logs.reasons())
    # The handshake failed before any RPC reached the server.
    assert coordinator.streams == []


def test_the_server_name_override_verifies_a_certificate_for_another_name(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    """The serving certificate names 127.0.0.1 and localhost; dialing 127.0.0.1 but
    expecting "coordinator.gpuctl-system.svc" must fail, expecting "localhost" works."""
    coordinator = make_coordinator(welcome(), pki=pki)
    wrong = ClientTransport(
        coordinator.target, ca_file=pki.ca_file, tls_server_name="coordinator.gpuctl-system.svc"
    )
    with running_agent(agent_config(host.root, token_file, wrong)) as agent:
        coordinator.wait_for("a failed attempt", agent.logs.reasons)
    assert agent.logs.reasons()[0].startswith("TLS verification failed")
    right = ClientTransport(coordinator.target, ca_file=pki.ca_file, tls_server_name="localhost")
    with running_agent(agent_config(host.root, token_file, right)):
        coordinator.wait_reports(1)


def test_insecure_works_against_a_plaintext_server(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome())
    transport = ClientTransport(coordinator.target, insecure=True)
    with running_agent(agent_config(host.root, token_file, transport)):
        (report,) = coordinator.wait_reports(1)
    assert report.trigger == CONNECTED
    assert coordinator.streams[0].metadata["authorization"] == f"Bearer {TOKEN}"


def test_tls_against_a_plaintext_server_fails_in_words(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome())
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))) as agent:
        coordinator.wait_for("a failed attempt", agent.logs.reasons)
    assert coordinator.streams == []
    assert agent.logs.reasons()[0].startswith(
        "TLS handshake failed: the server does not speak TLS (a plaintext server needs --insecure)"
    )


def test_a_device_event_sends_the_change_at_once(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    source = PipeSource()
    coordinator = make_coordinator(welcome(rescan=3600), pki=pki)
    config = agent_config(
        host.root, token_file, tls(coordinator.target, pki), udev=True, debounce_quiet=0.05
    )
    with running_agent(config, event_source=lambda: source):
        coordinator.wait_reports(1)
        vfs = host.add_vfs(B580, 2, driver="xe", first_drm_minor=1)
        # What the kernel announces when VFs are enabled: an add and a bind per VF.
        for address in vfs:
            path = f"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/{address}"
            source.push(
                UEvent("add", "pci", path, {"PCI_ID": "8086:E20B", "PCI_CLASS": "30000"}),
                UEvent("bind", "pci", path, {"PCI_ID": "8086:E20B", "DRIVER": "xe"}),
            )
        update = coordinator.wait_reports(2)[1]
        time.sleep(0.3)
        reports = coordinator.streams[0].reports()
    assert (update.trigger, update.sequence) == (api.ReportUpdate.DEVICE_EVENT, 2)
    assert update.report.devices[0].sriov.num_vfs == 2
    # One burst, one report.
    assert len(reports) == 2
    assert source.closed


def test_unrequested_reports_wait_for_room_in_the_report_rate(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    """max 1 report a minute: the CONNECTED one fills the window, so a change found by the
    rescan is held back, while an InspectRequest is still answered at once."""
    coordinator = make_coordinator(welcome(rescan=0.05, rate=1), pki=pki)
    with running_agent(agent_config(host.root, token_file, tls(coordinator.target, pki))) as agent:
        coordinator.wait_reports(1)
        host.add_vfs(B580, 1, driver="xe", first_drm_minor=1)
        coordinator.wait_for(
            "the change held back",
            lambda: any(r.getMessage().startswith("change held back") for r in agent.logs.records),
        )
        time.sleep(0.3)
        assert len(coordinator.streams[0].reports()) == 1
        coordinator.send_inspect("now")
        answer = coordinator.wait_reports(2)[1]
    assert (answer.trigger, answer.request_id) == (REQUESTED, "now")
    assert answer.report.devices[0].sriov.num_vfs == 1
