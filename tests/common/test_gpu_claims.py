"""Allocated GPU ResourceClaims on nodes, and which DRA version discovery lets us list
(gpuctl/common/gpu_claims.py)."""

from __future__ import annotations

from typing import Any

from gpuctl.common.gpu_claims import claims_on_nodes, served_dra_version


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {}}}


def _claim(name: str, driver: str, node: str | None) -> dict[str, Any]:
    allocation: dict[str, Any] = {"devices": {"results": [{"driver": driver, "device": "card0"}]}}
    if node is not None:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        allocation["nodeSelector"] = {"nodeSelectorTerms": [term]}
    return {"metadata": {"namespace": "ml", "name": name}, "status": {"allocation": allocation}}


def test_claims_are_placed_on_their_node_and_a_claim_without_a_node_is_everywhere() -> None:
    nodes = [_node("a"), _node("b")]
    claims = [
        _claim("train-1", "gpu.intel.com", "a"),
        _claim("train-0", "gpu.intel.com", "a"),
        _claim("other", "nvidia.com", "b"),
        _claim("anywhere", "gpu.intel.com", None),
    ]
    assert claims_on_nodes(claims, nodes) == {
        "a": ("ml/anywhere", "ml/train-0", "ml/train-1"),
        "b": ("ml/anywhere",),
    }


def test_the_preferred_served_dra_version_or_none() -> None:
    assert served_dra_version({"resource.k8s.io": ["v1beta1", "v1"]}) == "v1"
    assert served_dra_version({"resource.k8s.io": ["v1beta1"]}) == "v1beta1"
    assert served_dra_version({"resource.k8s.io": ["v1alpha3"]}) == "v1alpha3"  # 1.31
    assert served_dra_version({"resource.k8s.io": ["v1alpha3", "v1beta1"]}) == "v1beta1"
    assert served_dra_version({"resource.k8s.io": ["v1alpha2"]}) is None  # another shape
    assert served_dra_version({"apps": ["v1"]}) is None
