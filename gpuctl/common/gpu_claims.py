"""Allocated GPU ResourceClaims and the nodes they pin (plain dicts, no I/O).

A claim allocated by the GPU DRA driver holds devices the driver must not be pulled from;
its `status.allocation.nodeSelector` says which node they are on. Shared by the coordinator's
rollout and by `gpuctl rollout plan`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.common.node_selectors import node_name, node_selector_matches

GPU_DRA_DRIVER = "gpu.intel.com"


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
