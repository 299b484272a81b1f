"""What the Nodes' labels say about a GPUDriver's Module: targeted, marked, left, unserved."""

from __future__ import annotations

import copy
import json
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import TARGET_LABEL
from gpuctl.gpudriver import driver_nodes as nf
from gpuctl.gpudriver.driver_nodes import planned_part, watched_node_part
from gpuctl.gpudriver.known_issues import known_issues
from gpuctl.gpudriver.targeting import node_kernel
from gpuctl.rollout.input.facts import node_facts as rollout_node_facts
from tests.support import samples
from tests.support.samples import node

READY = "kmm.node.kubernetes.io/ns.gpu-policy-gpu.ready"
VERSION = "kmm.node.kubernetes.io/version-module.ns.gpu-policy-gpu"


def facts(*nodes: dict[str, Any]) -> nf.DriverNodes:
    return nf.driver_nodes(nodes, "gpu-policy", READY, VERSION)


def test_nodes_are_classified_by_their_labels() -> None:
    found = facts(
        node("targeted", {TARGET_LABEL: "gpu-policy", READY: "", VERSION: "v1-0a1b2c3d"}),
        node("loading", {TARGET_LABEL: "gpu-policy", VERSION: "v1-0a1b2c3d"}),
        node("old-ready", {READY: ""}),
        node("old-versioned", {VERSION: "v1"}),
        node("other-driver", {TARGET_LABEL: "other", READY: ""}),
        node("unrelated", {"kubernetes.io/arch": "amd64"}),
    )
    assert [n["metadata"]["name"] for n in found.targeted] == ["loading", "targeted"]
    assert found.ready == ("old-ready", "other-driver", "targeted")
    assert [n["metadata"]["name"] for n in found.marked] == [
        "loading",
        "old-ready",
        "old-versioned",
        "other-driver",
        "targeted",
    ]
    assert found.left() == ("loading", "old-ready", "other-driver", "targeted")
    assert found.left(count_ready=False) == ("loading", "targeted")
    assert [n["metadata"]["name"] for n in nf.to_target(found)] == ["old-ready", "old-versioned"]
    assert nf.foreign(found, "gpu-policy") == (("other-driver", "other"),)


def test_a_node_read_twice_counts_once_as_its_newest_copy() -> None:
    older = node("n1", {READY: ""})
    older["metadata"]["resourceVersion"] = "7"
    newer = node("n1", {READY: "", TARGET_LABEL: "gpu-policy"})
    newer["metadata"]["resourceVersion"] = "9"
    found = facts(newer, older)
    assert [n["metadata"]["resourceVersion"] for n in found.marked] == ["9"]
    assert nf.to_target(found) == ()
    assert nf.ref(newer) == nf.NodeRef("n1", "9")


def test_nothing_left_when_no_node_carries_a_label() -> None:
    assert facts(node("n1", {"kubernetes.io/arch": "amd64"})).left() == ()


MAPPINGS_68 = [{"regexp": "^6\\.8\\."}]
MAPPINGS_70 = [{"regexp": "^7\\.0\\."}]


def test_unserved_are_the_nodes_an_update_takes_the_mapping_from() -> None:
    nodes = [
        node("on-68", kernel="6.8.0-31-generic"),
        node("on-70", kernel="7.0.0-1-generic"),
        node("on-69", kernel="6.9.0-1-generic"),
        node("plus", kernel="6.8.0-31-generic+"),
        node("no-kernel"),
    ]
    assert nf.unserved(nodes, MAPPINGS_68, MAPPINGS_70) == ("on-68", "plus")
    assert nf.unserved(nodes, MAPPINGS_68, [*MAPPINGS_70, *MAPPINGS_68]) == ()
    # Neither serves 6.9: the update changes nothing there.
    assert nf.unserved(nodes, MAPPINGS_70, MAPPINGS_68) == ("on-70",)


def _full_node() -> dict[str, Any]:
    """A Node as a kubelet reports it, with the bulk the coordinator never reads."""
    return {
        "metadata": {
            "name": "gpu-7",
            "uid": "u-7",
            "resourceVersion": "812",
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"gpu": "yes", "kubernetes.io/arch": "amd64", names.TARGET_LABEL: "xe"},
            "annotations": {names.SINCE: "2026-11-30T11:00:00Z", "node.alpha/ttl": "0"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "podCIDR": "10.0.7.0/24",
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "gpu.intel.com/xe": "8"},
            "allocatable": {"cpu": "63", "memory": "500Gi", "gpu.intel.com/xe": "8"},
            "addresses": [{"type": "InternalIP", "address": "10.1.0.7"}],
            "conditions": [
                {
                    "type": condition,
                    "status": "False" if condition != "Ready" else "True",
                    "reason": f"Kubelet{condition}",
                    "message": "kubelet is posting ready status " * 3,
                    "lastHeartbeatTime": "2026-11-30T11:59:00Z",
                    "lastTransitionTime": "2026-11-30T10:00:00Z",
                }
                for condition in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "nodeInfo": {
                "kernelVersion": "6.8.0-40-generic",
                "osImage": "Ubuntu 26.04 LTS",
                "containerRuntimeVersion": "containerd://2.1.0",
                "bootID": "b-7",
            },
            "images": [
                {"names": [f"registry.example/team/image-{i}@sha256:{i:064x}"], "sizeBytes": i}
                for i in range(50)
            ],
        },
    }


def test_the_watched_part_of_a_node_answers_every_reader_as_the_whole_node_does() -> None:
    full = _full_node()
    kept = watched_node_part(copy.deepcopy(full))
    assert rollout_node_facts(kept, wanted=True) == rollout_node_facts(full, wanted=True)
    assert node_kernel(kept) == node_kernel(full)
    assert planned_part(kept) == planned_part(full)
    firmware_spec = samples.minimal_spec()
    firmware_spec["nodeSelector"] = {"gpu": "yes"}
    firmware_spec["kernelModule"]["firmwarePath"] = "/lib/firmware/updates"
    issues = known_issues(firmware_spec, [full])
    assert issues, "the sample node should meet the firmware-on-containerd issue"
    assert known_issues(firmware_spec, [kept]) == issues
    assert len(json.dumps(kept)) * 5 < len(json.dumps(full))
