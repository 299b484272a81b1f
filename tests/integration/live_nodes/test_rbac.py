"""Live node reports work under exactly the permissions the chart grants the coordinator.

The coordinator's ServiceAccount gets coordinator/policies/rbac.py's cluster rules (as the chart's
generated ClusterRole does) and nothing else; as that account it reviews an agent's token,
creates and writes the agent's GPUNode, and checks a NodeService caller's access.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator.kube.client import Kube, path
from coordinator.live_nodes.serving_label import ServingLabel
from gpuctl.api.v1alpha1 import node_service_pb2 as node_pb
from gpuctl.api.v1alpha1 import node_service_pb2_grpc as node_grpc
from gpuctl.common.names import SERVING_LABEL
from testbed.agent_client import sample_report
from testbed.cluster_agents import (
    AgentPods,
    connect,
    delete_gpunode,
    get_gpunode,
    running_live_nodes,
)
from testbed.coordinator_rbac import bound_coordinator
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls, serving_tls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def coordinator_client(kube_cluster: KubeCluster, namespace: str, kube_admin: Any) -> Iterator[Any]:
    """An ApiClient of ServiceAccount `coordinator`, bound to the chart's rules only."""
    with bound_coordinator(Kube(kube_admin), namespace) as account:
        yield kube_cluster.service_account_client(namespace, account)


def test_live_nodes_under_the_charts_rbac(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    make_node: Any,
    kube_admin: Any,
    coordinator_client: Any,
    tmp_path: Path,
) -> None:
    tls: ServingTls = serving_tls(tmp_path / "tls")
    node = make_node("gpu").metadata.name
    agents = AgentPods(kube_cluster, namespace, kube_admin)
    admin = Kube(kube_admin)
    try:
        with (
            running_live_nodes(kube_cluster, namespace, tls, api_client=coordinator_client) as live,
            connect(live, tls, agents.token(node)) as agent,
        ):
            agent.hello(node)
            agent.welcome()
            agent.report(sample_report(node))
            wait_until(
                "the GPUNode is written",
                lambda: ((get_gpunode(admin, node) or {}).get("status") or {}).get("summary"),
            )
            # The caller's check (TokenReview + SubjectAccessReview) as the coordinator: the
            # agent's own account may not list gpunodes, and is told so.
            caller = kube_cluster.service_account_token(namespace, "gpuctl-agent")
            credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca_pem)
            with grpc.secure_channel(f"localhost:{live.port}", credentials) as channel:
                stub = node_grpc.NodeServiceStub(channel)
                with pytest.raises(grpc.RpcError) as raised:
                    stub.ListNodes(
                        node_pb.ListNodesRequest(),
                        metadata=(("authorization", f"Bearer {caller}"),),
                    )
            error: Any = raised.value
            assert error.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "may not list gpunodes.gpuctl.dev" in error.details()
    finally:
        agents.delete_pods()
        delete_gpunode(admin, node)


def test_the_leader_labels_its_own_pod_for_the_grpc_service(
    namespace: str, kube_admin: Any, coordinator_client: Any
) -> None:
    admin = Kube(kube_admin)
    pods = path("", "v1", "pods", namespace=namespace)
    admin.request(
        "POST",
        pods,
        body={
            "metadata": {"name": "coordinator-0"},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/gpuctl"}]},
        },
    )

    def labels() -> dict[str, str]:
        pod = admin.request("GET", f"{pods}/coordinator-0")
        return dict(pod["metadata"].get("labels") or {})

    try:
        label = ServingLabel(Kube(coordinator_client), namespace, "coordinator-0")
        label.start()
        assert labels() == {SERVING_LABEL: "true"}
        label.stop()
        assert labels() == {}
    finally:
        admin.request("DELETE", f"{pods}/coordinator-0", body={"gracePeriodSeconds": 0})
