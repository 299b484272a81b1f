"""NodeService, the direct read API: RBAC decides who sees nodes, fresh reads reach the agent.

Callers authenticate with ServiceAccount tokens for the API server's own audience (what a
kubeconfig holds); a ClusterRole granting get/list on gpunodes.gpuctl.dev lets one of them
in, and the other, with no grant, sees nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from gpuctl.api.v1alpha1 import node_service_pb2 as node_pb
from gpuctl.api.v1alpha1 import node_service_pb2_grpc as node_grpc
from testbed.agent_client import OPEN_CLIENTS, sample_report
from testbed.cluster_agents import AgentPods, connect, delete_gpunode, running_live_nodes
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def live(kube_cluster: KubeCluster, namespace: str, tls: ServingTls) -> Iterator[LiveNodes]:
    with running_live_nodes(kube_cluster, namespace, tls, inspect_timeout=2.0) as running:
        yield running


@contextlib.contextmanager
def node_service(live: LiveNodes, tls: ServingTls) -> Iterator[node_grpc.NodeServiceStub]:
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca_pem)
    with grpc.secure_channel(f"localhost:{live.port}", credentials) as channel:
        yield node_grpc.NodeServiceStub(channel)


def _auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error: Any = raised.value
    return error.code(), error.details()


def test_an_authorised_caller_sees_nodes_and_fresh_reads_reach_the_agent(
    *,
    make_node: Any,
    agents: AgentPods,
    live: LiveNodes,
    tls: ServingTls,
    reader_token: str,
    kube_admin: Any,
) -> None:
    node = make_node("gpu").metadata.name
    try:
        with connect(live, tls, agents.token(node)) as agent, node_service(live, tls) as stub:
            agent.hello(node, version="agent-7")
            agent.welcome()
            agent.report(sample_report(node, (OPEN_CLIENTS,)))
            wait_until("reported", lambda: (r := live.registry.get(node)) and r.report)

            listed = stub.ListNodes(node_pb.ListNodesRequest(), metadata=_auth(reader_token))
            assert [n.node_name for n in listed.nodes] == [node]
            state = listed.nodes[0]
            assert state.session == node_pb.NodeState.CONNECTED
            assert state.fresh
            assert state.agent_version == "agent-7"
            assert state.report == sample_report(node, (OPEN_CLIENTS,))

            agent.answer_inspects(lambda _id: sample_report(node, observed_seconds=77))
            fresh = stub.GetNode(
                node_pb.GetNodeRequest(node_name=node, fresh=True), metadata=_auth(reader_token)
            )
            assert fresh.report == sample_report(node, observed_seconds=77)
            assert fresh.age.ToNanoseconds() < 2_000_000_000

            unknown = node_pb.GetNodeRequest(node_name="no-such-node")
            code, details = _code(lambda: stub.GetNode(unknown, metadata=_auth(reader_token)))
            assert code is grpc.StatusCode.NOT_FOUND
            assert "no agent has reported for node no-such-node" in details

            agent.stop_answering()
            slow = node_pb.GetNodeRequest(node_name=node, fresh=True, timeout=Duration(seconds=1))
            code, details = _code(lambda: stub.GetNode(slow, metadata=_auth(reader_token)))
            assert code is grpc.StatusCode.DEADLINE_EXCEEDED
            assert "did not answer within 1s" in details
    finally:
        delete_gpunode(Kube(kube_admin), node)


def test_an_unauthorised_caller_sees_nothing(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    make_node: Any,
    agents: AgentPods,
    live: LiveNodes,
    tls: ServingTls,
    reader_token: str,
    kube_admin: Any,
) -> None:
    node = make_node("gpu").metadata.name
    nobody = kube_cluster.service_account_token(namespace, "nobody")
    try:
        with connect(live, tls, agents.token(node)) as agent, node_service(live, tls) as stub:
            agent.hello(node)
            agent.welcome()
            agent.report(sample_report(node))
            wait_until("reported", lambda: (r := live.registry.get(node)) and r.report)
            listing = node_pb.ListNodesRequest()
            one = node_pb.GetNodeRequest(node_name=node)

            code, details = _code(lambda: stub.ListNodes(listing, metadata=_auth(nobody)))
            assert code is grpc.StatusCode.PERMISSION_DENIED
            assert f"system:serviceaccount:{namespace}:nobody may not list" in details
            code, _ = _code(lambda: stub.GetNode(one, metadata=_auth(nobody)))
            assert code is grpc.StatusCode.PERMISSION_DENIED

            assert _code(lambda: stub.ListNodes(listing))[0] is grpc.StatusCode.UNAUTHENTICATED
            bogus = _auth("not-a-token")
            assert _code(lambda: stub.GetNode(one, metadata=bogus))[0] is (
                grpc.StatusCode.UNAUTHENTICATED
            )
            # An agent token is for our audience, not the API server's: it is not a caller's.
            agent_token = agents.token(node)
            assert _code(lambda: stub.GetNode(one, metadata=_auth(agent_token)))[0] is (
                grpc.StatusCode.UNAUTHENTICATED
            )
            # The control: the same request with the reader's token succeeds.
            assert stub.GetNode(one, metadata=_auth(reader_token)).node_name == node
    finally:
        delete_gpunode(Kube(kube_admin), node)
