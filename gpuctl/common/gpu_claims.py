"""Allocated GPU ResourceClaims and the nodes they pin (plain dicts, no I/O).

A claim allocated by the GPU DRA driver holds devices the driver must not be pulled from;
its `status.allocation.nodeSelector` says which node they are on; a claim that is not
node-local pins every node (unknown is never safe). Shared by the coordinator's rollout and by
`gpuctl rollout plan`. Which DRA version to list is API discovery's answer: where no version
of `resource.k8s.io` that gpuctl reads is served, no claim can be read - a pod that references
one then counts as a GPU pod (gpu_pods.py) - but where one is served and the list fails, the
claims are unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuctl.common.nodes import node_name, node_selector_matches

GPU_DRA_DRIVER = "gpu.intel.com"
DRA_GROUP = "resource.k8s.io"
# ResourceClaim versions whose status.allocation.devices.results[].driver and .nodeSelector we
# read, most preferred first: v1 (Kubernetes 1.34+), v1beta2 (1.33), v1beta1 (1.32), v1alpha3
# (1.31, where DRA is alpha and served only when switched on). v1alpha2 (1.30's classic DRA)
# has another shape: where only it is served, claims count as unreadable (gpu_pods.py).
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")


def served_dra_version(served: Mapping[str, Sequence[str]]) -> str | None:
    """The ResourceClaim version to list, from discovery (group -> served versions); None
    when DRA is not served."""
    versions = served.get(DRA_GROUP) or ()
    return next((v for v in DRA_VERSIONS if v in versions), None)


def is_gpu_allocation(claim: Mapping[str, Any], dra_driver: str = GPU_DRA_DRIVER) -> bool:
    """True when some device of the claim was allocated by `dra_driver`."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return any(r.get("driver") == dra_driver for r in results)


def claim_nodes(claim: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> set[str] | None:
    """The nodes an allocated claim's devices are on; None when not node-local (anywhere)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    selector = allocation.get("nodeSelector")
    if not selector:
        return None
    return {node_name(n) for n in nodes if node_selector_matches(selector, n)}


def claims_on_nodes(
    claims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    dra_driver: str = GPU_DRA_DRIVER,
) -> dict[str, tuple[str, ...]]:
    """node name -> the allocated GPU claims (namespace/name, sorted) whose devices are on it.
    A claim that is not node-local is on every node."""
    node_list = list(nodes)
    found: dict[str, list[str]] = {}
    for claim in claims:
        if not is_gpu_allocation(claim, dra_driver):
            continue
        meta = claim.get("metadata") or {}
        label = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        placed = claim_nodes(claim, node_list)
        if placed is None:
            placed = {node_name(n) for n in node_list}
        for name in placed:
            found.setdefault(name, []).append(label)
    return {name: tuple(sorted(labels)) for name, labels in found.items()}
