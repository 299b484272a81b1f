"""GPU pods on a node, and their eviction (pure helpers; controller.py does the requests).

A GPU pod requests or limits a `gpu.intel.com/*` extended resource in any container (init
containers too) and has not finished. Pods using GPUs through DRA show up as allocated
`gpu.intel.com` ResourceClaims instead (see `claims_on_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.rollout.facts import GpuPod
from gpuctl.common.gpu_claims import GPU_DRA_DRIVER, claim_nodes, is_gpu_allocation

GPU_RESOURCE_PREFIX = "gpu.intel.com/"
FINISHED = ("Succeeded", "Failed")


def _requests_gpu(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        if any(str(k).startswith(GPU_RESOURCE_PREFIX) for k in resources.get(kind) or {}):
            return True
    return False


def is_gpu_pod(pod: Mapping[str, Any]) -> bool:
    if (pod.get("status") or {}).get("phase") in FINISHED:
        return False
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return any(_requests_gpu(c) for c in containers)


def gpu_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[GpuPod, ...]:
    found = []
    for pod in pods:
        if is_gpu_pod(pod):
            meta = pod.get("metadata") or {}
            found.append(GpuPod(str(meta.get("namespace", "")), str(meta.get("name", ""))))
    return tuple(sorted(found, key=str))


def eviction(pod: GpuPod) -> dict[str, Any]:
    """The Eviction API body for a pod (policy/v1): PodDisruptionBudgets are respected."""
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
    }


def claims_on_nodes(
    claims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    dra_driver: str = GPU_DRA_DRIVER,
) -> dict[str, tuple[str, ...]]:
    """node name -> allocated GPU claims (namespace/name) whose devices are on it. A claim
    that is not node-local is on every node: unknown is never safe."""
    node_list = list(nodes)
    out: dict[str, list[str]] = {}
    for claim in claims:
        if not is_gpu_allocation(claim, dra_driver):
            continue
        meta = claim.get("metadata") or {}
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        placed = claim_nodes(claim, node_list)
        if placed is None:
            placed = {str(n["metadata"]["name"]) for n in node_list}
        for node in placed:
            out.setdefault(node, []).append(name)
    return {node: tuple(sorted(names)) for node, names in out.items()}
