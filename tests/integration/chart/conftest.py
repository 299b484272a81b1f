"""The release most chart tests install: the chart's defaults, ports free on this machine (so
its coordinator and agents can run here with the rendered flags as they are), and every
optional rule of the NetworkPolicy and the Prometheus gate's token and CA mounts (so the API
server checks each one's shape)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube
from testbed.cluster_api import TEST_LABEL
from testbed.harness.access import KubeCluster
from testbed.harness.ports import free_loopback_ports
from tests.support.chart_release import Release, chart_release


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    grpc_port, metrics_port, health_port, grpc_health_port = free_loopback_ports(4)
    values = {
        "coordinator": {
            # Manage only this test's GPUDrivers; ports free on this machine, so the
            # coordinator can run with the rendered flags as they are.
            "gpudriverSelector": f"{TEST_LABEL}={namespace}",
            "grpc": {"port": grpc_port},
            "metricsPort": metrics_port,
            # Mounted and flagged, so the API server checks the volumes' shape.
            "prometheus": {
                "bearerToken": {"source": "serviceAccount"},
                "ca": {"configMap": "openshift-service-ca.crt", "key": "service-ca.crt"},
            },
        },
        "agent": {"healthPort": health_port, "grpcHealthPort": grpc_health_port},
        # Every optional rule of the policy, so the API server checks each one's shape.
        "networkPolicy": {
            "enabled": True,
            "grpcFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
            "metricsFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
            ],
            "prometheus": {"to": [{"ipBlock": {"cidr": "10.96.0.0/12"}}]},
            "extraEgress": [{"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]}],
        },
    }
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, values) as installed:
        yield installed
