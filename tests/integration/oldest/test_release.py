"""The package's control plane is the chart's floor, not the newest release by mistake (a
GPUCTL_KUBE_OLDEST naming the wrong folder would otherwise pass every test here unnoticed)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from testbed.harness.access import KubeCluster
from tests.chart.test_kube_floor import chart_floor

pytestmark = pytest.mark.integration


def test_the_api_server_is_the_release_the_chart_names_as_its_floor(
    kube_cluster: KubeCluster,
) -> None:
    with kube_cluster.admin_client() as api_client:
        info = k8s.VersionApi(api_client).get_code()
    assert (int(info.major), int(info.minor.rstrip("+"))) == chart_floor(), info.git_version
