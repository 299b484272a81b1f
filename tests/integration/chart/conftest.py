"""The releases the chart tests install. `release`: the chart's defaults, ports free on this
machine (so its coordinator and agents can run here with the rendered flags as they are), and
every optional rule of the NetworkPolicy and the Prometheus gate's token and CA mounts (so the
API server checks each one's shape). `previous_chart_release`: values the previous chart takes
too, for the upgrade tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube
from testbed.harness.access import KubeCluster
from tests.support.chart_release import Release, base_values, chart_release


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    values = base_values(namespace)
    # Mounted and flagged, so the API server checks the volumes' shape.
    values["coordinator"]["prometheus"] = {
        "bearerToken": {"source": "serviceAccount"},
        "ca": {"configMap": "openshift-service-ca.crt", "key": "service-ca.crt"},
    }
    # Every optional rule of the policy, so the API server checks each one's shape.
    values["networkPolicy"] = {
        "enabled": True,
        "grpcFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
        "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
        ],
        "prometheus": {"to": [{"ipBlock": {"cidr": "10.96.0.0/12"}}]},
        "extraEgress": [{"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]}],
    }
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, values) as installed:
        yield installed


@pytest.fixture
def previous_chart_release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    """A release whose values both this chart and the previous one (tests/golden/charts/)
    take: the upgrade tests install the previous chart with them (it refuses newer keys)."""
    values = base_values(namespace)
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, values) as installed:
        yield installed
