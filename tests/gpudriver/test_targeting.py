"""Which nodes a GPUDriver wants: selector and kernel mapping, as KMM matches kernels."""

from __future__ import annotations

from typing import Any

from gpuctl.gpudriver.targeting import mapping_for, node_kernel, wanted_nodes, wants_node


def node(name: str, kernel: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": "amd64", **labels}},
        "status": {"nodeInfo": {"kernelVersion": kernel}},
    }


SPEC = {
    "nodeSelector": {"gpu": "yes"},
    "kernelModule": {
        "kernelMappings": [
            {"regexp": r"6\.8\.0-\d+-generic", "containerImage": "r/xe:a"},
            {"regexp": "^6\\.", "containerImage": "r/xe:b"},
        ]
    },
}


def test_the_kernel_loses_one_trailing_plus() -> None:
    assert node_kernel(node("a", "6.8.0-60-generic+")) == "6.8.0-60-generic"
    assert node_kernel({"metadata": {"name": "a"}}) == ""


def test_the_first_matching_mapping_wins_and_regexps_are_unanchored() -> None:
    mappings = SPEC["kernelModule"]["kernelMappings"]  # type: ignore[index]
    assert mapping_for("6.8.0-60-generic", mappings)["containerImage"] == "r/xe:a"  # type: ignore[index]
    assert mapping_for("x6.8.0-60-generic-y", mappings)["containerImage"] == "r/xe:a"  # type: ignore[index]
    assert mapping_for("6.11.0-1-oem", mappings)["containerImage"] == "r/xe:b"  # type: ignore[index]
    assert mapping_for("5.15.0-1-generic", mappings) is None
    assert mapping_for("", mappings) is None


def test_a_literal_is_compared_whole() -> None:
    assert mapping_for("6.8.0", [{"literal": "6.8.0"}]) == {"literal": "6.8.0"}
    assert mapping_for("6.8.0-1", [{"literal": "6.8.0"}]) is None


def test_wanted_nodes_need_the_selector_the_arch_and_a_mapping() -> None:
    nodes = [
        node("match", "6.8.0-60-generic", gpu="yes"),
        node("other-label", "6.8.0-60-generic", gpu="no"),
        node("old-kernel", "5.15.0-1-generic", gpu="yes"),
        {
            **node("arm", "6.8.0-60-generic", gpu="yes"),
            "metadata": {"name": "arm", "labels": {"gpu": "yes", "kubernetes.io/arch": "arm64"}},
        },
    ]
    assert wanted_nodes(SPEC, nodes) == frozenset({"match"})


def test_nfd_labeling_adds_the_gpu_pci_label() -> None:
    spec = {**SPEC, "useNFDLabeling": True}
    plain = node("a", "6.8.0-60-generic", gpu="yes")
    labelled = node(
        "b", "6.8.0-60-generic", gpu="yes", **{"intel.feature.node.kubernetes.io/gpu-pci": "true"}
    )
    assert not wants_node(spec, plain)
    assert wants_node(spec, labelled)


def test_no_kernel_module_wants_nothing() -> None:
    assert not wants_node({"nodeSelector": {}}, node("a", "6.8.0-60-generic"))


def test_wanted_nodes_is_wants_node_for_each() -> None:
    """The fleet-wide answer (selector built and each kernel matched once) names exactly the
    nodes the one-node answer wants: the reconciler's known issues rely on it."""
    spec = {**SPEC, "tolerateAllTaints": False}
    tainted = node("tainted", "6.8.0-60-generic", gpu="yes")
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}
    nodes = [
        node("served-a", "6.8.0-60-generic", gpu="yes"),
        node("served-b", "6.11.0-1-oem+", gpu="yes"),
        node("unserved", "5.15.0-1-generic", gpu="yes"),
        node("no-kernel", "", gpu="yes"),
        node("unselected", "6.8.0-60-generic", gpu="no"),
        tainted,
    ]
    one_by_one = {n["metadata"]["name"] for n in nodes if wants_node(spec, n)}
    assert one_by_one == {"served-a", "served-b"}
    assert wanted_nodes(spec, nodes) == one_by_one
