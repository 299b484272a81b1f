"""Two coordinators sharding one cluster by node pool (`--node-selector`), side by side.

Real API server, real gRPC over TLS, two LiveNodes each serving its own pool: each accepts its
pool's agents and refuses the others' with a message saying why, writes only its own nodes'
GPUNodes, and its sweep for orphaned sessions leaves the other pool's GPUNodes alone (without
the scope, each would mark every other node Disconnected). A Node relabelled into a pool is
served by that pool's coordinator from then on, and no longer by the one it left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, path
from coordinator.live_nodes.live import LiveNodes
from testbed.agent_client import AgentClient, sample_report
from testbed.cluster_agents import (
    AgentPods,
    connect,
    delete_gpunode,
    get_gpunode,
    running_live_nodes,
)
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration
POOL = "gpuctl.dev/pool"


@pytest.fixture
def kube(kube_admin: Any) -> Kube:
    return Kube(kube_admin)


@dataclass(frozen=True)
class Shards:
    a: LiveNodes
    b: LiveNodes
    pool_a: str
    pool_b: str


@pytest.fixture
def shards(kube_cluster: KubeCluster, namespace: str, tls: ServingTls) -> Iterator[Shards]:
    # Pool names of this test only, so other tests' Nodes are in neither shard.
    pool_a, pool_b = f"{namespace}-a", f"{namespace}-b"
    with (
        running_live_nodes(kube_cluster, namespace, tls, node_selector=f"{POOL}={pool_a}") as a,
        running_live_nodes(kube_cluster, namespace, tls, node_selector=f"{POOL}={pool_b}") as b,
    ):
        yield Shards(a, b, pool_a, pool_b)


def _session(kube: Kube, node: str) -> str | None:
    return ((get_gpunode(kube, node) or {}).get("status") or {}).get("session")


def _wait_session(kube: Kube, node: str, session: str) -> None:
    wait_until(f"{node}'s GPUNode says {session}", lambda: _session(kube, node) == session)


def _agent(kube: Kube, node: str) -> str | None:
    return ((get_gpunode(kube, node) or {}).get("status") or {}).get("agentVersion")


def _serve(agent: AgentClient, node: str, version: str) -> None:
    """An agent that got in: Hello as `version`, Welcome, a report, heartbeats from now on."""
    agent.hello(node, version=version)
    agent.welcome()
    agent.report(sample_report(node))
    agent.keep_heartbeating(0.5)


def _refusal(live: LiveNodes, tls: ServingTls, token: str, node: str) -> tuple[Any, str]:
    with connect(live, tls, token) as agent:
        agent.hello(node)
        return agent.final_status()


def test_each_shard_serves_its_pool_and_leaves_the_others_gpunodes_alone(
    make_node: Any,
    agents: AgentPods,
    shards: Shards,
    tls: ServingTls,
    kube: Kube,
) -> None:
    pool_a, pool_b = shards.a, shards.b
    node_a = make_node("a", {POOL: shards.pool_a}).metadata.name
    node_b = make_node("b", {POOL: shards.pool_b}).metadata.name
    try:
        wait_until("shard a lists its node", lambda: pool_a.scope.contains(node_a) is True)
        wait_until("shard b lists its node", lambda: pool_b.scope.contains(node_b) is True)
        assert pool_a.scope.contains(node_b) is False
        assert pool_b.scope.contains(node_a) is False

        code, details = _refusal(pool_a, tls, agents.token(node_b), node_b)
        assert code is grpc.StatusCode.FAILED_PRECONDITION
        assert node_b in details
        assert "--node-selector" in details
        assert pool_a.registry.get(node_b) is None

        with (
            connect(pool_a, tls, agents.token(node_a)) as agent_a,
            connect(pool_b, tls, agents.token(node_b)) as agent_b,
        ):
            for agent, node, version in ((agent_a, node_a, "in-a"), (agent_b, node_b, "in-b")):
                _serve(agent, node, version)
            for node in (node_a, node_b):
                _wait_session(kube, node, "Connected")

            # Each shard's sweep for orphans, then a write asked of it for the other pool's
            # node (in this thread, so done when it returns): unscoped, each would write the
            # other's node Disconnected, since no agent of it is connected there.
            for live, other in ((pool_a, node_b), (pool_b, node_a)):
                live.mirror.mark_orphans_disconnected()
                live.mirror.sync(other)
            assert _session(kube, node_a) == _session(kube, node_b) == "Connected"
        # Each shard still writes its own agent's end.
        for node in (node_a, node_b):
            _wait_session(kube, node, "Disconnected")
    finally:
        for node in (node_a, node_b):
            delete_gpunode(kube, node)


def _label_pool(kube: Kube, node: str, pool: str) -> None:
    kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node),
        body={"metadata": {"labels": {POOL: pool}}},
        content_type=MERGE_PATCH,
    )


def test_a_node_relabelled_into_a_pool_is_served_there_and_no_longer_where_it_was(
    make_node: Any,
    agents: AgentPods,
    shards: Shards,
    tls: ServingTls,
    kube: Kube,
) -> None:
    pool_a, pool_b = shards.a, shards.b
    node = make_node("moving").metadata.name  # in no pool yet
    try:
        wait_until("shard a has listed its pool", lambda: pool_a.scope.contains(node) is False)
        code, _ = _refusal(pool_a, tls, agents.token(node), node)
        assert code is grpc.StatusCode.FAILED_PRECONDITION

        _label_pool(kube, node, shards.pool_a)
        wait_until("shard a has the node", lambda: pool_a.scope.contains(node) is True)
        with connect(pool_a, tls, agents.token(node)) as in_a:
            _serve(in_a, node, "in-a")
            wait_until("shard a wrote its GPUNode", lambda: _agent(kube, node) == "in-a")

            _label_pool(kube, node, shards.pool_b)
            wait_until("shard a let it go", lambda: pool_a.scope.contains(node) is False)
            wait_until("shard b has it", lambda: pool_b.scope.contains(node) is True)
            with connect(pool_b, tls, agents.token(node)) as in_b:
                _serve(in_b, node, "in-b")
                wait_until("shard b wrote its GPUNode", lambda: _agent(kube, node) == "in-b")
                # The old stream ends: shard a's record says Disconnected, but the node is
                # shard b's now, so shard a writes nothing (not even when asked to).
                in_a.close()
                wait_until(
                    "shard a saw its stream end",
                    lambda: pool_a.registry.get(node).session.value == "Disconnected",  # type: ignore[union-attr]
                )
                pool_a.mirror.sync(node)
                assert _session(kube, node) == "Connected"
                assert _agent(kube, node) == "in-b"
                code, _ = _refusal(pool_a, tls, agents.token(node), node)
                assert code is grpc.StatusCode.FAILED_PRECONDITION
    finally:
        delete_gpunode(kube, node)
