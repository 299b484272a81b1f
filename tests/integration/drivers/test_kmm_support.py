"""A KMM older than v2.4.0 gets no Module: the coordinator reads KMM's NodeModulesConfig CRD,
and without `status.modules[].bootId` in it (KMM before v2.4.0 reloads a node on a
NotReady→Ready flip, and an upgrade across v2.4.0 reloads every loaded node at once) it writes
nothing and says why in the GPUDriver's status and a Warning Event.

The CRD is the cluster's: this test runs on a control plane of its own, with KMM's real CRD
edited as an older KMM's would be, so no other test's KMM loses the field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.drivers.kmm_check import CRD_PATH
from coordinator.kube.client import Kube, path
from testbed.cluster_api import Api, gpudriver, simple_spec, status_of
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator
from tests.support.own_cluster import own_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def old_kmm_cluster() -> Iterator[KubeCluster]:
    with own_cluster("gpuctl-old-kmm-") as (_plane, cluster):
        yield cluster


def without_boot_id(crd: dict[str, Any]) -> dict[str, Any]:
    """KMM's NodeModulesConfig CRD as KMM before v2.4.0 had it: no status.modules[].bootId."""
    older = copy.deepcopy(crd)
    for version in older["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        status["properties"]["modules"]["items"]["properties"].pop("bootId")
    return older


def test_no_module_is_written_for_a_kmm_older_than_2_4(old_kmm_cluster: KubeCluster) -> None:
    api = Api(old_kmm_cluster)
    try:
        kube: Kube = api.kube
        kube.request("PUT", CRD_PATH, body=without_boot_id(kube.request("GET", CRD_PATH)))
        namespace = kube.request(
            "POST", path("", "v1", "namespaces"), body={"metadata": {"generateName": "t-old-"}}
        )["metadata"]["name"]
        name = f"{namespace}-gpu"
        created = api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
        with running_coordinator(old_kmm_cluster, namespace):
            status = wait_until(
                "the GPUDriver's status names the old KMM",
                lambda: (s := status_of(api, name)) and s.get("errors") and s,
                timeout_seconds=60,
            )
            assert any("KMM is older than v2.4.0" in e for e in status["errors"]), status
            warnings = [
                e
                for e in api.events_for(created["metadata"]["uid"])
                if e["type"] == "Warning" and e["reason"] == "KMMUnsupported"
            ]
            assert warnings, "no KMMUnsupported Warning Event"
            assert api.get_module(namespace, f"{name}-gpu") is None
    finally:
        api.close()
