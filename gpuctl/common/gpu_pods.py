"""Which pods use a GPU through the device plugin (plain dicts, no I/O).

A GPU pod requests or limits a `gpu.intel.com/*` extended resource in any container (init
containers too) and has not finished: while it runs, the node's driver must not be unloaded
(the rollout waits for it, or evicts it with `evictGPUPods`). Pods using GPUs through DRA
show up as allocated ResourceClaims instead (gpu_claims.py) — except where the API server
does not serve DRA: claims written while it was served still hold their devices, and nothing
can read them, so a running pod that references any ResourceClaim counts as a GPU pod then
(unknown is never safe). `gpuctl rollout plan` counts GPU pods with this rule, as the rollout
does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_RESOURCE_PREFIX = "gpu.intel.com/"
FINISHED_PHASES = ("Succeeded", "Failed")


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """A container (or init container) of the pod requests or limits a GPU resource."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(str(key).startswith(GPU_RESOURCE_PREFIX) for key in resources.get(kind) or {}):
                return True
    return False


def references_claims(pod: Mapping[str, Any]) -> bool:
    """The pod references ResourceClaims (DRA), whichever driver allocated them."""
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def is_gpu_pod(pod: Mapping[str, Any], *, dra_served: bool = True) -> bool:
    """A pod that has not finished and requests or limits a GPU resource — or, where DRA is
    not served (`dra_served` false), references a ResourceClaim nobody can read."""
    if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
        return False
    return requests_gpu(pod) or (not dra_served and references_claims(pod))
