"""The coordinator works under exactly the permissions the chart grants it
(coordinator/policies/rbac.py), as a ServiceAccount with a real token, not as the cluster admin.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.kube.client import path
from gpuctl.common.names import TARGET_LABEL
from gpuctl.gpudriver.module_spec import desired_module, kmm_version, version_label
from testbed.cluster_api import (
    TEST_LABEL,
    Api,
    gpudriver,
    node_labels,
    simple_spec,
    wait_status,
)
from testbed.coordinator_rbac import bound_coordinator
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator
from tests.support.gpu_nodes import GpuNodes

pytestmark = pytest.mark.integration


@pytest.fixture
def coordinator_account(api: Api, namespace: str) -> Iterator[str]:
    """ServiceAccount `coordinator` bound to the chart's rules (Events in `default`)."""
    with bound_coordinator(api.kube, namespace) as account:
        yield account


def test_coordinator_runs_with_the_charts_rbac_only(
    kube_cluster: KubeCluster,
    *,
    namespace: str,
    api: Api,
    coordinator_account: str,
    gpu_nodes: GpuNodes,
) -> None:
    name, module, node = f"{namespace}-sa", f"{namespace}-sa-gpu", f"{namespace}-n1"
    gpu_nodes.add("n1", node_labels(namespace))
    token = kube_cluster.service_account_token(namespace, coordinator_account)
    spec = simple_spec(namespace)
    spec["kernelModule"]["version"] = "v1"
    created = api.create_driver(gpudriver(name, namespace, spec))
    # A Module an older gpuctl wrote, loaded on n1: the coordinator labels n1 (Node patch)
    # before it switches the Module to TARGET_LABEL.
    old = desired_module(created, namespace)
    assert old is not None
    old["spec"]["selector"] = {TEST_LABEL: namespace, "kubernetes.io/arch": "amd64"}
    api.kube.request("POST", api.module_path(namespace), body=old)
    api.label_nodes(node, {version_label(namespace, module): kmm_version(spec)})
    with (
        kube_cluster.token_client(token) as client,
        running_coordinator(kube_cluster, namespace, client=client),
    ):
        wait_until(
            "node targeted",
            lambda: api.kube.request("GET", path("", "v1", "nodes", name=node))["metadata"][
                "labels"
            ].get(TARGET_LABEL),
        )
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        assert status["errors"] == []
        assert "NodesTargeted" in api.event_reasons(created["metadata"]["uid"])
        api.delete_driver(name)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "Removing", "is Removing")
        api.unload_as_the_rollout_would(node, name, namespace)
        wait_until("module deleted", lambda: api.get_module(namespace, module) is None)
        wait_until("gpudriver gone", lambda: api.get_driver(name) is None)
