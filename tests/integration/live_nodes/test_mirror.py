"""GPUNode objects mirror what agents report: only on change, and inspect requests answered.

Real API server, real gRPC over TLS. Writes are counted on the API server itself: a GPUNode's
resourceVersion changes with every write, so an unchanged resourceVersion proves no write.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, path
from coordinator.live_nodes.live import LiveNodes
from testbed.agent_client import OPEN_CLIENTS, sample_report
from testbed.cluster_agents import AgentPods, connect, delete_gpunode, get_gpunode
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration
REQUESTED_AT = "2026-11-29T23:00:00Z"


@pytest.fixture
def kube(kube_admin: Any) -> Kube:
    return Kube(kube_admin)


def _status(kube: Kube, node: str) -> dict[str, Any]:
    return dict((get_gpunode(kube, node) or {}).get("status") or {})


def _version(kube: Kube, node: str) -> str:
    return str((get_gpunode(kube, node) or {})["metadata"]["resourceVersion"])


def test_reports_reach_status_only_on_change(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, kube: Kube
) -> None:
    node_object = make_node("gpu")
    node = node_object.metadata.name
    try:
        with connect(live, tls, agents.token(node)) as agent:
            agent.hello(node, version="agent-9", boot_id="boot-a")
            agent.welcome()
            agent.report(sample_report(node, (OPEN_CLIENTS,)))
            status = wait_until(
                "the GPUNode has the report",
                lambda: (s := _status(kube, node)).get("summary", {}).get("blockers") == 1 and s,
            )
            assert status["session"] == "Connected"
            assert status["agentVersion"] == "agent-9"
            assert status["bootId"] == "boot-a"
            assert status["summary"] == {
                "gpus": 1,
                "drivers": ["vfio-pci", "xe"],
                "module": "xeb_v7.1.4.6_260728.7",
                "blockers": 1,
                "atBoot": "Unknown",  # the sample report does not say
            }
            assert status["report"]["blockers"][0]["reason"] == "OPEN_CLIENTS"
            assert status["report"]["devices"][1]["role"] == "VIRTUAL"
            assert "answeredInspectRequest" not in status
            gpunode = get_gpunode(kube, node) or {}
            owner = gpunode["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["uid"]) == (
                "Node",
                node,
                node_object.metadata.uid,
            )

            # Heartbeats and a rescan that found nothing new (only observedAt differs): no write.
            version = _version(kube, node)
            writes = live.mirror.writes
            for _ in range(3):
                agent.heartbeat()
            agent.report(sample_report(node, (OPEN_CLIENTS,), observed_seconds=99))
            agent.heartbeat()
            wait_until(
                "the coordinator holds the rescan",
                lambda: live.registry.get(node).report_sequence == 2,  # type: ignore[union-attr]
            )
            time.sleep(1.0)  # > the mirror's coalescing interval: any write would have happened
            assert _version(kube, node) == version
            assert live.mirror.writes == writes

            # A real change is written; the emptied blocker list is gone, not merged.
            agent.report(sample_report(node))
            status = wait_until(
                "blockers cleared",
                lambda: (s := _status(kube, node)).get("summary", {}).get("blockers") == 0 and s,
            )
            assert "blockers" not in status["report"]
        wait_until(
            "the session shows Disconnected",
            lambda: _status(kube, node).get("session") == "Disconnected",
        )
        assert _status(kube, node)["summary"]["blockers"] == 0  # what was known is kept
    finally:
        delete_gpunode(kube, node)


def _request_inspection(kube: Kube, node: str, request_id: str) -> None:
    kube.request(
        "PATCH",
        path("gpuctl.dev", "v1alpha1", "gpunodes", name=node),
        body={"spec": {"inspectRequest": {"id": request_id, "requestedAt": REQUESTED_AT}}},
        content_type=MERGE_PATCH,
    )


def test_an_inspect_request_is_answered_by_the_agent(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, kube: Kube
) -> None:
    node = make_node("gpu").metadata.name
    try:
        with connect(live, tls, agents.token(node)) as agent:
            agent.hello(node)
            agent.welcome()
            agent.report(sample_report(node, (OPEN_CLIENTS,)))
            wait_until("the GPUNode exists", lambda: _status(kube, node).get("report"))
            agent.answer_inspects(lambda _id: sample_report(node, observed_seconds=500))
            _request_inspection(kube, node, "req-1")
            status = wait_until(
                "req-1 answered",
                lambda: (s := _status(kube, node)).get("answeredInspectRequest") == "req-1" and s,
            )
            assert "inspectError" not in status
            assert status["summary"]["blockers"] == 0
            assert status["report"]["observedAt"] == "2027-01-15T08:08:20Z"

        # The agent is gone: the next request is answered with the reason, not left hanging.
        wait_until("disconnected", lambda: _status(kube, node).get("session") == "Disconnected")
        _request_inspection(kube, node, "req-2")
        status = wait_until(
            "req-2 answered with an error",
            lambda: (s := _status(kube, node)).get("answeredInspectRequest") == "req-2" and s,
        )
        assert status["inspectError"].startswith("agent not connected")
        assert status["summary"]["blockers"] == 0
    finally:
        delete_gpunode(kube, node)


def test_an_agent_that_does_not_answer_gets_an_error_after_the_deadline(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, kube: Kube
) -> None:
    node = make_node("gpu").metadata.name
    try:
        with connect(live, tls, agents.token(node)) as agent:
            agent.hello(node)
            agent.welcome()
            agent.report(sample_report(node))
            wait_until("the GPUNode exists", lambda: _status(kube, node).get("report"))
            _request_inspection(kube, node, "slow-1")
            request = agent.next_message()
            assert request.inspect.request_id == "slow-1"
            status = wait_until(
                "slow-1 answered with an error",
                lambda: (s := _status(kube, node)).get("answeredInspectRequest") == "slow-1" and s,
            )
            assert status["inspectError"] == "the agent did not answer within 3s"
    finally:
        delete_gpunode(kube, node)
