"""The reference's known issues as GPUDriver warnings, with the coordinator on a real API server.

A GPUDriver with `firmwarePath` whose targeted nodes run containerd, and one on a node whose
OS the driver does not support: `status.warnings`, the `KnownIssues` condition and a Warning
Event name those nodes (a node the GPUDriver does not target is never named). A GPUDriver
whose selector matches no node says so: not Ready (`NoNodesTargeted`), its rollout `NoNodes`,
not `Complete` with 0/0.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, path
from testbed.cluster_api import Api, gpudriver, node_labels, simple_spec, wait_status
from testbed.fixture_types import MakeNode
from testbed.harness.access import KubeCluster
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration


def set_node_info(api: Api, node: str, **info: str) -> None:
    api.kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node, subresource="status"),
        body={"status": {"nodeInfo": info}},
        content_type=MERGE_PATCH,
    )


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def test_firmware_on_containerd_and_an_unsupported_os_name_their_nodes(
    kube_cluster: KubeCluster, *, api: Api, namespace: str, make_node: MakeNode
) -> None:
    on_containerd = make_node("a", node_labels(namespace)).metadata.name
    old_os = make_node("b", node_labels(namespace)).metadata.name
    untargeted = make_node("c", {"kubernetes.io/arch": "amd64"}).metadata.name
    set_node_info(api, old_os, osImage="Ubuntu 24.04.3 LTS", containerRuntimeVersion="cri-o://1.34")
    set_node_info(api, untargeted, osImage="Debian GNU/Linux 13 (trixie)")
    name = f"{namespace}-fw"
    spec = simple_spec(namespace)
    spec["kernelModule"]["firmwarePath"] = "/firmware"
    created = api.create_driver(gpudriver(name, namespace, spec))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(
            api, name, lambda s: len(s.get("warnings") or []) == 2, "lists two warnings"
        )
    firmware, os_warning = status["warnings"]
    assert f"nodes {on_containerd} run containerd" in firmware
    assert f"nodes {old_os} (Ubuntu 24.04.3 LTS) do not run Ubuntu 26.04" in os_warning
    assert untargeted not in firmware + os_warning
    issues = condition(status, "KnownIssues")
    assert (issues["status"], issues["reason"]) == ("True", "FirmwarePathOnContainerd")
    assert {"FirmwarePathOnContainerd", "UnsupportedOS"} <= api.event_reasons(
        created["metadata"]["uid"]
    )


def test_a_selector_that_matches_no_node_is_not_ready_and_its_rollout_not_complete(
    kube_cluster: KubeCluster, *, api: Api, namespace: str, make_node: MakeNode
) -> None:
    make_node("a", {"kubernetes.io/arch": "amd64"})
    name = f"{namespace}-nowhere"
    spec = simple_spec(namespace)
    spec["kernelModule"]["version"] = "v1"
    created = api.create_driver(gpudriver(name, namespace, spec))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(
            api,
            name,
            lambda s: (
                (s.get("rollout") or {}).get("state") == "NoNodes"
                and condition(s, "Ready").get("reason") == "NoNodesTargeted"
            ),
            "says it targets no node",
        )
    ready = condition(status, "Ready")
    assert ready["status"] == "False"
    assert ready["message"] == (
        f"the node selector (gpuctl.test/ns={namespace}, kubernetes.io/arch=amd64) matches no "
        "node: the driver is loaded nowhere"
    )
    assert status["warnings"] == [ready["message"]]
    assert status["rollout"]["progress"] == "0/0"
    assert "NoNodesTargeted" in api.event_reasons(created["metadata"]["uid"])
