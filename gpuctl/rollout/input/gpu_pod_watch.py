"""GPU pods on a node, and their eviction (pure helpers; controller.py does the requests).

Which pods count as GPU pods is the shared rule of gpuctl/common/gpu_pods.py that
`gpuctl rollout plan` applies too; here such pods become the rollout's facts, and an eviction
is the Eviction API's body.

The coordinator watches the cluster's Pods and keeps of each only `watched_part`: what that
rule and the rollout read (name, namespace, node, phase, GPU resources, whether it references
ResourceClaims), what names a pod holding a GPU and what the pause and the drain select on (its
UID, labels, controlling owner and readiness: gpuctl/rollout/input/pod_facts.py), whether its spec
selects on gpuctl.dev/driver-ready (pod_facts.driver_ready_selection), and of KMM's worker Pods also
their state (kmm_activity.worker_pod_part). A cluster's Pods are many; kept whole they would be most
of its memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.common.gpu_pods import (
    extended_resources,
    is_gpu_pod,
    references_claims,
)
from gpuctl.rollout.input.facts import GpuPod
from gpuctl.rollout.input.image_probe import is_probe_pod, probe_part
from gpuctl.rollout.input.kmm_activity import is_worker_pod, worker_pod_part
from gpuctl.rollout.input.pod_facts import DAEMON_SET, controller_of, driver_ready_selection

CONTAINER_LISTS = ("containers", "initContainers")


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


def _gpu_resources(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's extended resources (any of them may be a GPUDriver's GPU resource,
    rollout.gpuResources), without cpu, memory and the like."""
    resources = container.get("resources") or {}
    kept = {}
    for kind in ("requests", "limits"):
        gpu = {k: v for k, v in (resources.get(kind) or {}).items() if "/" in str(k)}
        if gpu:
            kept[kind] = gpu
    return kept


# A Pod being deleted (a KMM worker Pod the rollout deleted, held by KMM's finalizer) is not
# deleted again.
KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "labels")


def _controller_reference(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind, name = controller_of(meta)
    return [{"kind": kind, "name": name, "controller": True}] if kind else []


def _ready_condition(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "Ready", "status": c.get("status")}
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") == "Ready"
    ]


def watched_part(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the rollout keeps of a watched Pod: is_gpu_pod answers the same on it."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    kept_spec: dict[str, Any] = {"nodeName": spec.get("nodeName") or ""}
    kept_spec.update(driver_ready_selection(spec))
    for containers in CONTAINER_LISTS:
        gpu = [{"resources": r} for c in spec.get(containers) or [] if (r := _gpu_resources(c))]
        if gpu:
            kept_spec[containers] = gpu
    if spec.get("resourceClaims"):
        kept_spec["resourceClaims"] = [
            {"name": c.get("name", "")} for c in spec["resourceClaims"] if isinstance(c, Mapping)
        ] or [{"name": ""}]
    status = pod.get("status") or {}
    kept: dict[str, Any] = {
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
        "spec": kept_spec,
        "status": {"phase": status.get("phase", ""), "conditions": _ready_condition(status)},
    }
    if owner := _controller_reference(meta):
        kept["metadata"]["ownerReferences"] = owner
    if is_worker_pod(pod):  # KMM's worker: what kmm_activity tells of it
        worker = worker_pod_part(pod)
        kept["metadata"]["labels"] = worker["metadata"]["labels"]
        kept["status"] = worker["status"]
    # gpuctl's image probe: what it proves (gpuctl/rollout/input/image_probe.py)
    if is_probe_pod(pod):
        probe = probe_part(pod)
        kept["metadata"]["annotations"] = probe["metadata"]["annotations"]
        kept["status"] = probe["status"]
    return kept


def pod_node(pod: Mapping[str, Any]) -> str:
    """The node a Pod is bound to ("" while unscheduled)."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def concerns_rollout(pod: Mapping[str, Any]) -> bool:
    """A Pod whose changes (started, Ready, finished, gone) the rollout waits on: one its
    checks may count as a GPU pod (any extended resource: which are GPUs is each GPUDriver's
    rollout.gpuResources; see is_gpu_pod, either way DRA is served), or a DaemonSet's (a GPU
    daemon paused or coming back). Other Pods' churn concerns nobody; a step waiting on them
    looks again by itself."""
    kind, _ = controller_of(pod.get("metadata") or {})
    if is_probe_pod(pod):  # a reload's image probe: a check waits on its end
        return True
    return bool(extended_resources(pod)) or references_claims(pod) or kind == DAEMON_SET
