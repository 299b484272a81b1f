"""GPU pods on a node, and their eviction (pure helpers; controller.py does the requests).

Which pods count as GPU pods is the shared rule of gpuctl/common/gpu_pods.py that
`gpuctl rollout plan` applies too; here such pods become the rollout's facts, and an eviction
is the Eviction API's body.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.rollout.facts import GpuPod
from gpuctl.common.gpu_pods import is_gpu_pod


def gpu_pods(pods: Iterable[Mapping[str, Any]], *, dra_served: bool = True) -> tuple[GpuPod, ...]:
    found = []
    for pod in pods:
        if is_gpu_pod(pod, dra_served=dra_served):
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
