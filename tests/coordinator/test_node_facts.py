"""What the Nodes' labels say about a GPUDriver's Module: targeted, marked, left, unserved."""

from __future__ import annotations

from typing import Any

from coordinator.drivers import node_facts as nf
from gpuctl.common.names import TARGET_LABEL
from tests.support.samples import node

READY = "kmm.node.kubernetes.io/ns.gpu-policy-gpu.ready"
VERSION = "kmm.node.kubernetes.io/version-module.ns.gpu-policy-gpu"


def facts(*nodes: dict[str, Any]) -> nf.NodeFacts:
    return nf.node_facts(nodes, "gpu-policy", READY, VERSION)


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
