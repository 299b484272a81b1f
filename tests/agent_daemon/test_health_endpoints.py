"""/healthz, /readyz and grpc.health.v1 of a running agent, before and after it connects."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from gpuctl.rpc.grpc_client import ClientTransport
from testbed.fakehost import FakeHost
from testbed.harness.ports import free_loopback_ports
from testbed.harness.waiting import wait_until
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import agent_config, running_agent, welcome


def get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def grpc_status(port: int, service: str) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        except grpc.RpcError as error:
            return str(error.code().name)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))


def test_probes_say_healthy_and_ready_once_connected(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    http_port, grpc_port = free_loopback_ports(2)
    # Nothing listens yet: the agent is alive (inspections work) but not ready.
    down = ClientTransport(f"127.0.0.1:{free_loopback_ports(1)[0]}", insecure=True)
    config = agent_config(
        host.root, token_file, down, health_port=http_port, grpc_health_port=grpc_port
    )
    with running_agent(config) as agent:
        wait_until("the first inspection", lambda: get(http_port, "/healthz")[0] == 200)
        wait_until("a failed connect", agent.logs.reasons)
        status, body = get(http_port, "/readyz")
        assert status == 503
        assert body["connected"] is False
        assert str(body["disconnectReason"]).startswith("coordinator unreachable")
        assert (grpc_status(grpc_port, ""), grpc_status(grpc_port, "readiness")) == (
            "SERVING",
            "NOT_SERVING",
        )
        assert agent.daemon.http_port == http_port

    coordinator = make_coordinator(welcome())
    up = ClientTransport(coordinator.target, insecure=True)
    config = agent_config(
        host.root, token_file, up, health_port=http_port, grpc_health_port=grpc_port
    )
    with running_agent(config):
        coordinator.wait_reports(1)
        wait_until("ready", lambda: get(http_port, "/readyz")[0] == 200)
        status, body = get(http_port, "/healthz")
        assert status == 200
        assert body["healthy"] is True
        assert body["connected"] is True
        assert str(body["since"]).endswith("Z")
        assert str(body["lastInspection"]).endswith("Z")
        assert [grpc_status(grpc_port, name) for name in ("", "liveness", "readiness")] == [
            "SERVING"
        ] * 3
        assert grpc_status(grpc_port, "something-else") == "NOT_FOUND"
        assert get(http_port, "/metrics")[0] == 404


def test_a_host_root_that_disappears_makes_the_agent_unhealthy(
    host: FakeHost, token_file: Path, make_coordinator: MakeCoordinator
) -> None:
    (http_port,) = free_loopback_ports(1)
    coordinator = make_coordinator(welcome(rescan=0.1))
    config = agent_config(
        host.root,
        token_file,
        ClientTransport(coordinator.target, insecure=True),
        health_port=http_port,
    )
    with running_agent(config):
        coordinator.wait_reports(1)
        host.remove("sys")
        wait_until("unhealthy", lambda: get(http_port, "/healthz")[0] == 503)
        _, body = get(http_port, "/healthz")
        # Still connected: the coordinator keeps the last report it has, and hears why.
        assert body["connected"] is True
        assert "last inspection failed" in str(body["reason"])
        assert "not a Linux root (no sys/)" in str(body["reason"])
