"""Coordinator N against the CRDs of N+1: the chart's newer GPUDriver CRD is applied before the
coordinator is upgraded (docs/deploying.md#upgrading), and stored GPUDrivers then carry fields
this coordinator does not know, one of them defaulted by the API server. The coordinator reads
them tolerantly (gpuctl/gpudriver/unknown_fields.py): it rolls a new version node by node as
ever, and says which fields it ignored (status.warnings, UnknownFields). `kubectl get gpud`
shows the rollout's State, Target and Nodes (the API server's Table, the CRD's columns), and
the kstatus conditions say it is settled.

Its own control plane: the session's shared one keeps the chart's CRDs as they are.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.kube.client import Kube, KubeError, path
from gpuctl.common import names
from testbed.cluster_api import gpudriver
from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, old_root, wait_status
from tests.support.own_cluster import own_cluster

pytestmark = pytest.mark.integration

CRD = f"{names.GPUDRIVER_PLURAL}.{names.GROUP}"
FUTURE_DEFAULT = "15m"
SERVICE_UNAVAILABLE = 503


@pytest.fixture(scope="module")
def own_plane() -> Iterator[tuple[ControlPlane, KubeCluster]]:
    with own_cluster("gpuctl-test-newer-crd-") as plane:
        yield plane


@pytest.fixture(scope="module")
def kube_cluster(own_plane: tuple[ControlPlane, KubeCluster]) -> KubeCluster:
    """Overrides the session's cluster for every fixture of this module."""
    return own_plane[1]


def newer_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """The GPUDriver CRD as a newer gpuctl might ship it: spec.rollout.futureBakeTime (a
    default) and spec.kernelModule.futureOption."""
    newer = copy.deepcopy(crd)
    for version in newer["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        spec["rollout"]["properties"]["futureBakeTime"] = {
            "type": "string",
            "default": FUTURE_DEFAULT,
        }
        spec["kernelModule"]["properties"]["futureOption"] = {"type": "boolean"}
    return newer


def apply_newer_crd(kube: Kube) -> None:
    crd_path = path("apiextensions.k8s.io", "v1", "customresourcedefinitions", name=CRD)
    kube.request("PUT", crd_path, body=newer_crd(kube.request("GET", crd_path)))

    def defaults_applied() -> bool:
        """A dry-run create is defaulted with the new schema: the API server serves it. While
        it swaps the CRD's storage for the new schema it answers 503 (ServiceUnavailable):
        not served yet, asked again."""
        probe = gpudriver("crd-probe", "default", {"rollout": {}})
        try:
            created = kube.request(
                "POST",
                path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
                query={"dryRun": "All"},
                body=probe,
            )
        except KubeError as err:
            if err.status == SERVICE_UNAVAILABLE:
                return False
            raise
        return bool(created["spec"]["rollout"].get("futureBakeTime") == FUTURE_DEFAULT)

    wait_until("the API server serves the newer CRD", defaults_applied, timeout_seconds=60)


def table_row(kube_admin: Any, name: str) -> dict[str, Any]:
    """`kubectl get gpud NAME`'s row: the API server's Table, column name to cell."""
    response = kube_admin.call_api(
        "GET",
        kube_admin.configuration.host
        + path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=name),
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    response.read()
    answer = json.loads(response.data)
    columns = [c["name"] for c in answer["columnDefinitions"]]
    return dict(zip(columns, answer["rows"][0]["cells"], strict=True))


def test_a_coordinator_rolls_gpudrivers_of_a_newer_crd_and_names_what_it_ignores(
    rollout_rig: RolloutRig, kube_admin: Any
) -> None:
    rig = rollout_rig
    apply_newer_crd(rig.kube)
    nodes = [rig.add_node(short, old_root) for short in ("a", "b")]
    rig.create_driver(OLD, FAST)
    rig.patch_driver({"spec": {"kernelModule": {"futureOption": True}}})
    stored = rig.driver()["spec"]
    assert stored["rollout"]["futureBakeTime"] == FUTURE_DEFAULT  # the API server's default
    assert stored["kernelModule"]["futureOption"] is True
    rig.start_coordinator()
    for node in nodes:
        rig.start_agent(node)
    rig.wait_phases(dict.fromkeys(nodes, "Done"))
    rig.kernels.begin()
    rig.set_version(NEW)
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=180, version=rig.target())
    assert [module_version(rig, n) for n in nodes] == [NEW, NEW]
    assert sorted(rig.kernels.unloads) == sorted(nodes)  # once each, node by node

    def warned() -> list[str]:
        warnings = (rig.driver().get("status") or {}).get("warnings") or []
        return [w for w in warnings if "not known to this gpuctl-coordinator" in w]

    [warning] = wait_until("the coordinator names the ignored fields", warned)
    assert warning.startswith(
        "spec.kernelModule.futureOption, spec.rollout.futureBakeTime: not known to this "
        "gpuctl-coordinator, ignored"
    ), warning
    target = rig.target()
    wait_status(
        rig, "Complete", lambda s: (s.get("state"), s.get("targetVersion")) == ("Complete", target)
    )

    def settled() -> dict[str, str] | None:
        """The kstatus conditions once the reconciler has read the Complete rollout."""
        driver = rig.driver()
        found = {
            c["type"]: c["status"]
            for c in (driver.get("status") or {}).get("conditions") or []
            if c.get("observedGeneration") == driver["metadata"]["generation"]
        }
        return found if found.get("Reconciling") == "False" else None

    assert wait_until("Reconciling False at this generation", settled)["Stalled"] == "False"
    row = table_row(kube_admin, rig.driver()["metadata"]["name"])
    assert (row["State"], row["Target"], row["Nodes"], row["Version"]) == (
        "Complete",
        target,
        "2/2",
        NEW,
    )
