"""Which pods use a GPU through a device plugin (plain dicts, no I/O).

A GPU pod requests or limits a GPU extended resource in any container (init containers too)
and has not finished: while it runs, the node's driver must not be unloaded (the rollout
waits for it, or evicts it with `evictGPUPods`). The GPU resources are `gpu.intel.com/*` by
default; a GPUDriver names others in `rollout.gpuResources` (KubeVirt's and SR-IOV device
plugins name theirs differently): a name ending in `/` is a prefix, any other a whole
resource name. Pods using GPUs through DRA show up as allocated ResourceClaims instead
(gpu_claims.py) — except where the API server does not serve DRA: claims written while it
was served still hold their devices, and nothing can read them, so a running pod that
references any ResourceClaim counts as a GPU pod then (unknown is never safe). `gpuctl
rollout plan` counts GPU pods with this rule, as the rollout does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_GPU_RESOURCES = ("gpu.intel.com/",)
FINISHED_PHASES = ("Succeeded", "Failed")


def is_gpu_resource(name: str, resources: Sequence[str] = DEFAULT_GPU_RESOURCES) -> bool:
    """`name` is one of `resources`: under a prefix (ending in /), or that whole name."""
    return any(name.startswith(r) if r.endswith("/") else name == r for r in resources)


def extended_resources(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Every extended resource (a name with a /) any container requests or limits, sorted."""
    spec = pod.get("spec") or {}
    found: set[str] = set()
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            found.update(str(key) for key in resources.get(kind) or {} if "/" in str(key))
    return tuple(sorted(found))


def requests_gpu(pod: Mapping[str, Any], resources: Sequence[str] = DEFAULT_GPU_RESOURCES) -> bool:
    """A container (or init container) of the pod requests or limits a GPU resource."""
    return any(is_gpu_resource(name, resources) for name in extended_resources(pod))


def references_claims(pod: Mapping[str, Any]) -> bool:
    """The pod references ResourceClaims (DRA), whichever driver allocated them."""
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def is_gpu_pod(
    pod: Mapping[str, Any],
    *,
    dra_served: bool = True,
    resources: Sequence[str] = DEFAULT_GPU_RESOURCES,
) -> bool:
    """A pod that has not finished and requests or limits a GPU resource — or, where DRA is
    not served (`dra_served` false), references a ResourceClaim nobody can read."""
    if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
        return False
    return requests_gpu(pod, resources) or (not dra_served and references_claims(pod))
