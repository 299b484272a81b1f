"""Garbage on the wire ends only its own stream, with a status that says what was wrong.

One healthy agent stays connected through every bad stream and keeps being served: the
coordinator neither crashes nor blocks, and nothing it knew is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from coordinator.live_nodes.metrics import LiveNodesCollector
from coordinator.live_nodes.streams.freshness import is_fresh
from coordinator.live_nodes.streams.node_record import NodeRecord
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from testbed.agent_client import AgentClient, sample_report
from testbed.cluster_agents import AgentPods, connect, delete_gpunode, running_live_nodes
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration


def _huge_devices(node: str) -> agent_pb.AgentMessage:
    report = sample_report(node)
    for index in range(5000):
        report.devices.add(pci_address=f"0000:{index // 256:02x}:{index % 256 // 8:02x}.0")
    return agent_pb.AgentMessage(report=agent_pb.ReportUpdate(report=report, sequence=1))


def _huge_string(node: str) -> agent_pb.AgentMessage:
    report = sample_report(node)
    report.devices[0].platform = "x" * 100_000
    return agent_pb.AgentMessage(report=agent_pb.ReportUpdate(report=report, sequence=1))


def _other_node_report(node: str) -> agent_pb.AgentMessage:
    report = sample_report("somebody-else")
    return agent_pb.AgentMessage(report=agent_pb.ReportUpdate(report=report, sequence=1))


def _backwards(node: str) -> agent_pb.AgentMessage:
    return agent_pb.AgentMessage(
        report=agent_pb.ReportUpdate(report=sample_report(node), sequence=0)
    )


# (what, whether a valid Hello goes first, the bytes to send, expected code, text in details)
Case = tuple[str, bool, Callable[[str], bytes], grpc.StatusCode, str]
CASES: list[Case] = [
    (
        "raw bytes after Hello",
        True,
        lambda _n: b"\xff\xff\xff\xff\xff",
        grpc.StatusCode.INVALID_ARGUMENT,
        "malformed AgentMessage",
    ),
    (
        "raw bytes first",
        False,
        lambda _n: b"\x0a\xff\xff\xff\xff\x0f",
        grpc.StatusCode.INVALID_ARGUMENT,
        "malformed AgentMessage",
    ),
    (
        "a heartbeat first",
        False,
        lambda _n: agent_pb.AgentMessage(heartbeat=agent_pb.Heartbeat()).SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "the first message must be Hello, not heartbeat",
    ),
    (
        "a node name that is not a DNS subdomain",
        False,
        lambda _n: agent_pb.AgentMessage(
            hello=agent_pb.Hello(node_name="Not_A_Node!")
        ).SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "is not a DNS subdomain",
    ),
    (
        "thousands of devices",
        True,
        lambda n: _huge_devices(n).SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "report.devices has 5002 entries",
    ),
    (
        "a huge string",
        True,
        lambda n: _huge_string(n).SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "report.devices.platform is 100000 long",
    ),
    (
        "a report about another node",
        True,
        lambda n: _other_node_report(n).SerializeToString(),
        grpc.StatusCode.PERMISSION_DENIED,
        "not 'somebody-else'",
    ),
    (
        "sequence 0",
        True,
        lambda n: _backwards(n).SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "sequence 0",
    ),
    (
        "a message larger than the limit",
        True,
        lambda _n: b"\x0a" + b"\xff" * (5 * 1024 * 1024),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "",
    ),
]


def _metrics(live: LiveNodes) -> str:
    registry = CollectorRegistry()
    registry.register(LiveNodesCollector(live, time.monotonic))
    return generate_latest(registry).decode()


def _healthy_still_served(healthy: AgentClient, live: LiveNodes, node: str, mark: int) -> None:
    healthy.report(sample_report(node, observed_seconds=mark))
    healthy.heartbeat()
    wait_until(
        "the healthy agent's report is taken",
        lambda: (
            (r := live.registry.get(node)) is not None
            and r.report is not None
            and r.report.observed_at.seconds == 1_800_000_000 + mark
            and is_fresh(r, live.registry.monotonic(), 3.0)
        ),
        timeout_seconds=10,
    )


def test_garbage_ends_only_its_own_stream(
    make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, kube_admin: Any
) -> None:
    healthy_node = make_node("healthy").metadata.name
    bad_node = make_node("bad").metadata.name
    try:
        with connect(live, tls, agents.token(healthy_node)) as healthy:
            healthy.hello(healthy_node)
            healthy.welcome()
            for mark, (what, hello_first, payload, code, text) in enumerate(CASES, start=1):
                with connect(live, tls, agents.token(bad_node)) as bad:
                    if hello_first:
                        bad.hello(bad_node)
                        bad.welcome()
                    bad.send_raw(payload(bad_node))
                    got_code, details = bad.final_status()
                assert (got_code, text in details) == (code, True), (what, got_code, details)
                _healthy_still_served(healthy, live, healthy_node, mark)
            assert live.server.connected_nodes() == 1
            metrics = _metrics(live)
            assert 'gpuctl_agent_streams_refused_total{code="INVALID_ARGUMENT"} 7.0' in metrics
            assert 'gpuctl_agent_streams_refused_total{code="PERMISSION_DENIED"} 1.0' in metrics
            assert "gpuctl_agent_sessions 1.0" in metrics
            assert 'gpuctl_agent_nodes{state="fresh"} 1.0' in metrics
            # Both nodes' agents said hello as test-0.1 (the garbage came after).
            assert 'gpuctl_agent_versions{version="test-0.1"} 2.0' in metrics
            expiry = x509.load_pem_x509_certificate(tls.files.cert_file.read_bytes())
            seconds = expiry.not_valid_after_utc.timestamp()
            # Compared as numbers: the exposition writes a float's shortest form (1.79693116e+09).
            served = {
                sample.labels.get("certificate"): sample.value
                for family in text_string_to_metric_families(metrics)
                for sample in family.samples
                if sample.name == "gpuctl_tls_certificate_expiry_timestamp_seconds"
            }
            assert served == {"agent-grpc": seconds}, metrics
    finally:
        delete_gpunode(Kube(kube_admin), healthy_node)
        delete_gpunode(Kube(kube_admin), bad_node)


def test_reports_beyond_the_rate_limit_are_dropped_then_resynced(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    make_node: Any,
    agents: AgentPods,
    tls: ServingTls,
    kube_admin: Any,
) -> None:
    node = make_node("chatty").metadata.name
    with running_live_nodes(kube_cluster, namespace, tls, max_reports_per_minute=60) as live:
        try:
            with connect(live, tls, agents.token(node)) as agent:
                agent.hello(node)
                agent.welcome()
                for mark in range(1, 16):  # the burst is 10
                    agent.report(sample_report(node, observed_seconds=mark))
                agent.heartbeat()
                wait_until(
                    "the 10th report is held and the node is not fresh",
                    lambda: (
                        (r := live.registry.get(node)) is not None
                        and r.report_sequence == 10
                        and not r.in_sync
                    ),
                )
                agent.answer_inspects(lambda _id: sample_report(node, observed_seconds=15))

                def resynced() -> NodeRecord | None:
                    agent.heartbeat()  # the coordinator asks once the limit allows
                    record = live.registry.get(node)
                    return record if record is not None and record.in_sync else None

                record = wait_until("the coordinator resyncs", resynced, interval_seconds=0.2)
                assert record.report is not None
                assert record.report.observed_at.seconds == 1_800_000_015
        finally:
            delete_gpunode(Kube(kube_admin), node)
