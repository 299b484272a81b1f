"""Who may speak for a node: real bound ServiceAccount tokens, TokenReview, TLS, gRPC.

Tokens come from the TokenRequest API, bound to Pods placed on Nodes, exactly what the agent
DaemonSet's projected token is. The coordinator's LiveNodes runs in the test process against
the test API server; agents are the test package's AgentClient over real TLS sockets.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from coordinator.live_nodes.live import LiveNodes
from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from testbed.agent_client import sample_report
from testbed.cluster_agents import AgentPods, connect, resigned_token
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration


def _with_report(live: LiveNodes, node: str) -> NodeRecord | None:
    record = live.registry.get(node)
    return record if record is not None and record.report is not None else None


def test_the_node_the_token_is_bound_to_is_accepted(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, namespace: str
) -> None:
    node = make_node("gpu1").metadata.name
    with connect(live, tls, agents.token(node)) as agent:
        agent.hello(node, version="agent-1.2", boot_id="b-1")
        welcome = agent.welcome()
        assert welcome.heartbeat_interval.ToNanoseconds() == 1_000_000_000
        assert welcome.max_reports_per_minute == 60
        agent.report(sample_report(node))
        record = wait_until("the report is in", lambda: _with_report(live, node))
        assert record.session is Session.CONNECTED
        assert record.report == sample_report(node)
        assert record.agent_version == "agent-1.2"


def test_a_hello_naming_another_node_is_refused(
    *,
    make_node: Any,
    agents: AgentPods,
    live: LiveNodes,
    tls: ServingTls,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mine = make_node("mine").metadata.name
    other = make_node("other").metadata.name
    with connect(live, tls, agents.token(mine)) as agent:
        agent.hello(other)
        code, details = agent.final_status()
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert f"speaks for node {mine!r}, not {other!r}" in details
    assert live.registry.get(other) is None
    refused = [r for r in caplog.records if r.getMessage() == "agent stream refused"]
    assert [(r.__dict__["token_node"], r.__dict__["code"]) for r in refused] == [
        (mine, "PERMISSION_DENIED")
    ]


def test_a_newer_stream_for_the_node_replaces_the_older(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls
) -> None:
    node = make_node("n").metadata.name
    token = agents.token(node)
    with connect(live, tls, token) as first:
        first.hello(node, version="old")
        first.welcome()
        with connect(live, tls, token) as second:
            second.hello(node, version="new")
            second.welcome()
            code, details = first.final_status()
            assert code is grpc.StatusCode.ABORTED
            assert details == f"replaced by a newer stream for node {node}"
            second.report(sample_report(node))
            record = wait_until("the newer stream's report", lambda: _with_report(live, node))
            assert (record.session, record.agent_version) == (Session.CONNECTED, "new")
            assert live.server.connected_nodes() == 1


def test_no_token_is_unauthenticated(make_node: Any, live: LiveNodes, tls: ServingTls) -> None:
    node = make_node("n").metadata.name
    with connect(live, tls, None) as agent:
        agent.hello(node)
        code, details = agent.final_status()
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert "no bearer token" in details


def test_a_token_for_the_api_servers_audience_is_refused(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls
) -> None:
    """A genuine, bound agent token, but not minted for our audience."""
    node = make_node("n").metadata.name
    with connect(live, tls, agents.token(node, audiences=())) as agent:
        agent.hello(node)
        code, details = agent.final_status()
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert "gpuctl.dev/agent" in details


def test_an_expired_token_is_refused_and_the_same_token_unexpired_is_accepted(
    kube_cluster: KubeCluster,
    make_node: Any,
    agents: AgentPods,
    live: LiveNodes,
    tls: ServingTls,
) -> None:
    node = make_node("n").metadata.name
    token = agents.token(node)
    with connect(live, tls, resigned_token(kube_cluster, token, expires_in=-60)) as agent:
        agent.hello(node)
        code, _ = agent.final_status()
    assert code is grpc.StatusCode.UNAUTHENTICATED
    # The control: re-signed the same way but still valid, it passes the review.
    with connect(live, tls, resigned_token(kube_cluster, token, expires_in=600)) as agent:
        agent.hello(node)
        agent.welcome()


def test_a_token_of_another_service_account_is_refused(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, namespace: str
) -> None:
    """Any pod can mount a token with our audience; only the agent's ServiceAccount counts."""
    node = make_node("n").metadata.name
    with connect(live, tls, agents.token(node, service_account="other-sa")) as agent:
        agent.hello(node)
        code, details = agent.final_status()
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert f"system:serviceaccount:{namespace}:other-sa is not the agent's" in details


def test_reviews_are_cached_across_reconnects(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls
) -> None:
    node = make_node("n").metadata.name
    token = agents.token(node)
    before = live.server.reviewer.reviews_sent
    for _ in range(3):
        with connect(live, tls, token) as agent:
            agent.hello(node)
            agent.welcome()
    assert live.server.reviewer.reviews_sent == before + 1
