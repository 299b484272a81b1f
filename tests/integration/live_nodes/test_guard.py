"""Agent reports as the unload guard's second source, with a real coordinator and KMM emulator.

A GPUDriver's deletion is refused while its node reports a blocker, still refused once the
node's agent is gone (its report goes stale: unknown is never safe), and goes ahead once the
agent is back and reports no blockers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from coordinator.manager import Coordinator
from tests.harness.access import KubeCluster
from tests.harness.kmm_emulator import KmmEmulator
from tests.harness.waiting import wait_until
from tests.support.agent_client import OPEN_CLIENTS, sample_report
from tests.support.cluster_agents import (
    AgentPods,
    ServingTls,
    connect,
    delete_gpunode,
    running_live_nodes,
)
from tests.support.cluster_api import (
    Api,
    gpudriver,
    node_labels,
    simple_spec,
    wait_status,
)
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def coordinator_with_agents(
    cluster: KubeCluster, namespace: str, live: LiveNodes
) -> Iterator[Coordinator]:
    with running_coordinator(
        cluster, namespace, identity="coordinator-agents", blocker_sources=[live.guard_source]
    ) as coordinator:
        live.registry.subscribe(lambda _node: coordinator.nudge())  # as gpuctl-coordinator does
        yield coordinator


def _errors(status: dict[str, Any]) -> str:
    return " | ".join(status.get("errors") or [])


def test_deletion_waits_for_blockers_and_stale_reports(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
    kube_admin: Any,
    tls: ServingTls,
) -> None:
    name, module = f"{namespace}-g", f"{namespace}-g-gpu"
    node = make_node("n1", node_labels(namespace)).metadata.name
    agents = AgentPods(kube_cluster, namespace, kube_admin)
    token = agents.token(node)
    try:
        with (
            running_live_nodes(kube_cluster, namespace, tls, freshness=2.0) as live,
            coordinator_with_agents(kube_cluster, namespace, live),
        ):
            with connect(live, tls, token) as agent:
                agent.hello(node)
                agent.welcome()
                agent.keep_heartbeating(0.5)
                agent.report(sample_report(node, (OPEN_CLIENTS,)))
                created = api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
                wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")

                api.delete_driver(name)
                status = wait_status(
                    api, name, lambda s: "(OPEN_CLIENTS)" in _errors(s), "blocked by the agent"
                )
                assert f"node {node}: 1 process holds 0000:03:00.0 open" in _errors(status)
                assert api.get_module(namespace, module) is not None
                warnings = [
                    e
                    for e in api.events_for(created["metadata"]["uid"])
                    if e["reason"] == "UnloadBlocked"
                ]
                assert warnings
                assert warnings[0]["type"] == "Warning"
                assert f"node {node}" in warnings[0]["message"]

            # The agent goes away: its last report goes stale, and stale is unknown.
            status = wait_status(
                api, name, lambda s: "agent report is stale" in _errors(s), "blocked as stale"
            )
            assert "unknown is never safe" in _errors(status)
            assert api.get_module(namespace, module) is not None

            with connect(live, tls, token) as agent:
                agent.hello(node)
                agent.welcome()
                agent.keep_heartbeating(0.5)
                agent.report(sample_report(node))
                wait_until("module deleted", lambda: api.get_module(namespace, module) is None)
                wait_until("gpudriver gone", lambda: api.get_driver(name) is None)
    finally:
        agents.delete_pods()
        delete_gpunode(Kube(kube_admin), node)
