"""Agents of other releases on the wire to this coordinator (real gRPC over TLS, real API
server): a 0.1.0 agent's own bytes, and a newer agent's with fields this build does not know,
are both taken, the known fields exactly as sent and mirrored into the GPUNode; the
coordinator counts the agents by version (docs/deploying.md#version-skew)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from google.protobuf import json_format
from prometheus_client import CollectorRegistry, generate_latest

from coordinator.kube.client import Kube, KubeError
from coordinator.live_nodes.metrics import LiveNodesCollector
from coordinator.live_nodes.streams.node_record import NodeRecord
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from testbed.cluster_agents import AgentPods, connect, delete_gpunode, running_live_nodes
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until
from tests.support.wire import GOLDEN, field, golden_report, number_of

pytestmark = pytest.mark.integration


def report_message(report: bytes, node: str) -> bytes:
    """An AgentMessage carrying `report` as sent, its node name set to `node` (a later field
    wins on the wire, so the sent bytes stay as they were)."""
    named = report + field(number_of(report_pb.NodeReport, "node_name"), node.encode())
    update = field(number_of(agent_pb.ReportUpdate, "report"), named) + field(
        number_of(agent_pb.ReportUpdate, "sequence"), 1
    )
    return field(number_of(agent_pb.AgentMessage, "report"), update)


def test_an_older_and_a_newer_agent_are_both_read_as_sent(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    make_node: Any,
    agents: AgentPods,
    tls: ServingTls,
    kube_admin: Any,
) -> None:
    older, newer = make_node("older").metadata.name, make_node("newer").metadata.name
    sent = json.loads((GOLDEN / "node_report-0.1.0.json").read_text())
    future = field(9001, b"a newer agent's whole-node fact") + field(9002, 7)
    with running_live_nodes(kube_cluster, namespace, tls) as live:
        try:
            with (
                connect(live, tls, agents.token(older)) as old_agent,
                connect(live, tls, agents.token(newer)) as new_agent,
            ):
                old_agent.hello(older, version="0.1.0")
                new_agent.hello(newer, version="0.2.0")
                old_agent.welcome()
                new_agent.welcome()
                old_agent.send_raw(report_message(golden_report("0.1.0"), older))
                new_agent.send_raw(report_message(golden_report("0.1.0") + future, newer))
                for node in (older, newer):

                    def taken(name: str = node) -> NodeRecord | None:
                        record = live.registry.get(name)
                        return record if record is not None and record.report is not None else None

                    record = wait_until(f"{node}'s report is taken", taken)
                    assert record.report is not None
                    read = json_format.MessageToDict(record.report)
                    assert read == {**sent, "nodeName": node}
                registry = CollectorRegistry()
                registry.register(LiveNodesCollector(live, time.monotonic))
                metrics = generate_latest(registry).decode()
                assert 'gpuctl_agent_versions{version="0.1.0"} 1.0' in metrics
                assert 'gpuctl_agent_versions{version="0.2.0"} 1.0' in metrics
                kube = Kube(kube_admin)

                def mirrored() -> dict[str, Any] | None:
                    try:
                        gpunode = kube.request("GET", f"/apis/gpuctl.dev/v1alpha1/gpunodes/{newer}")
                    except KubeError as err:
                        if err.not_found:
                            return None  # not mirrored yet
                        raise
                    status = gpunode.get("status") or {}
                    return status if status.get("agentVersion") == "0.2.0" else None

                status = wait_until("the newer agent's GPUNode is mirrored", mirrored)
                assert status["agentVersion"] == "0.2.0"
        finally:
            delete_gpunode(Kube(kube_admin), older)
            delete_gpunode(Kube(kube_admin), newer)
