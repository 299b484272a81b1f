"""Only the leading coordinator serves agents; the standby starts serving when it takes over.

Two coordinators, each with its own LiveNodes as its leader-scoped part (as gpuctl-coordinator
wires it). The standby does not listen at all; agents reach the leader; when the leader stops
(releasing its Lease), the standby leads, listens, and accepts the agents that reconnect.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from coordinator.manager import Coordinator
from testbed.agent_client import sample_report
from testbed.cluster_agents import AgentPods, connect, delete_gpunode, make_live_nodes
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls, serving_tls
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def coordinator_serving(
    cluster: KubeCluster, namespace: str, tls: ServingTls, identity: str
) -> Iterator[tuple[Coordinator, LiveNodes]]:
    live, kube, api_client = make_live_nodes(cluster, namespace, tls)
    with running_coordinator(
        cluster,
        namespace,
        identity=identity,
        client=api_client,
        kube=kube,
        leader_scoped=[live],
    ) as coordinator:
        yield coordinator, live


def _serves(live: LiveNodes, tls: ServingTls, token: str, node: str) -> bool:
    with connect(live, tls, token) as agent:
        agent.hello(node)
        agent.welcome()
        agent.report(sample_report(node))
        wait_until("the report is held", lambda: (r := live.registry.get(node)) and r.report)
    return True


def test_only_the_leader_listens_and_the_standby_takes_over(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    make_node: Any,
    kube_admin: Any,
    tmp_path: Path,
) -> None:
    tls = serving_tls(tmp_path / "tls")
    node = make_node("gpu").metadata.name
    agents = AgentPods(kube_cluster, namespace, kube_admin)
    token = agents.token(node)
    try:
        with contextlib.ExitStack() as standby_scope:
            with coordinator_serving(kube_cluster, namespace, tls, "a") as (a, live_a):
                wait_until(
                    "a leads and listens", lambda: a.elector.leading.is_set() and live_a.port
                )
                b, live_b = standby_scope.enter_context(
                    coordinator_serving(kube_cluster, namespace, tls, "b")
                )
                assert _serves(live_a, tls, token, node)
                assert not b.elector.leading.is_set()
                assert live_b.port == 0  # the standby never opened its port
            wait_until("b leads and listens", lambda: b.elector.leading.is_set() and live_b.port)
            assert _serves(live_b, tls, token, node)
    finally:
        agents.delete_pods()
        delete_gpunode(Kube(kube_admin), node)
