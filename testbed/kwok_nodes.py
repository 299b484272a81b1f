"""What kwok-backed tests do to Nodes and workloads: GPU capacity, heartbeats, GPU Deployments.

A kwok Node is a Node like any other; kwok plays its kubelet (testbed/harness/kwok.py). These
helpers give it what a GPU node's device plugin would advertise (``gpu.intel.com/xe``), stop
and resume its heartbeat, read what the node-lifecycle controller made of it, and run GPU
workloads on the nodes the way users do: a Deployment (whose ReplicaSet replaces evicted
Pods), the scheduler placing each Pod, and a PodDisruptionBudget the Eviction API enforces.
"""

from __future__ import annotations

from typing import Any

from coordinator.kube.client import MERGE_PATCH, Kube, path
from testbed.harness.kwok import HEARTBEAT_LABEL, HEARTBEAT_STOPPED

GPU_RESOURCE = "gpu.intel.com/xe"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
WORKLOAD_LABEL = "app"


def give_gpus(kube: Kube, node: str, count: int) -> None:
    """Advertises ``count`` GPUs (and room for pods) in the Node's capacity, as the device
    plugin and kubelet of a GPU node would."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: str(count)}
    kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node, subresource="status"),
        body={"status": {"capacity": resources, "allocatable": resources}},
        content_type=MERGE_PATCH,
    )


def stop_heartbeat(kube: Kube, node: str) -> None:
    """kwok lets go of the Node (its Lease is no longer renewed), as if its kubelet died."""
    _label(kube, node, HEARTBEAT_STOPPED)


def resume_heartbeat(kube: Kube, node: str) -> None:
    """kwok takes the Node back: it renews the Lease and turns the Node Ready again."""
    _label(kube, node, None)


def _label(kube: Kube, node: str, value: str | None) -> None:
    kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node),
        body={"metadata": {"labels": {HEARTBEAT_LABEL: value}}},
        content_type=MERGE_PATCH,
    )


def ready_status(node: dict[str, Any]) -> str:
    """The Node's Ready condition status ("True", "False", "Unknown"; "" without one)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status", ""))
    return ""


def taint_keys(node: dict[str, Any]) -> set[str]:
    return {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or []}


def gpu_deployment(
    kube: Kube, namespace: str, name: str, *, replicas: int, node_selector: dict[str, str]
) -> None:
    """A Deployment of ``replicas`` Pods each requesting one GPU, on nodes matching
    ``node_selector``; its Pods terminate at once when deleted (no grace to wait out)."""
    labels = {WORKLOAD_LABEL: name}
    container = {
        "name": "train",
        "image": "registry.invalid/train:1",
        "resources": {"requests": {GPU_RESOURCE: "1"}, "limits": {GPU_RESOURCE: "1"}},
    }
    kube.request(
        "POST",
        path("apps", "v1", "deployments", namespace=namespace),
        body={
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": node_selector,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [container],
                    },
                },
            },
        },
    )


def disruption_budget(kube: Kube, namespace: str, name: str, *, min_available: int) -> None:
    """A PodDisruptionBudget over the Deployment ``name``'s Pods."""
    kube.request(
        "POST",
        path("policy", "v1", "poddisruptionbudgets", namespace=namespace),
        body={
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {
                "minAvailable": min_available,
                "selector": {"matchLabels": {WORKLOAD_LABEL: name}},
            },
        },
    )


def set_min_available(kube: Kube, namespace: str, name: str, min_available: int) -> None:
    kube.request(
        "PATCH",
        path("policy", "v1", "poddisruptionbudgets", namespace=namespace, name=name),
        body={"spec": {"minAvailable": min_available}},
        content_type=MERGE_PATCH,
    )


def budget_status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    pdb = kube.request(
        "GET", path("policy", "v1", "poddisruptionbudgets", namespace=namespace, name=name)
    )
    return dict(pdb.get("status") or {})


def workload_pods(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Deployment ``name``'s Pods, terminating ones included."""
    listed = kube.request(
        "GET",
        path("", "v1", "pods", namespace=namespace),
        query={"labelSelector": f"{WORKLOAD_LABEL}={name}"},
    )
    return list(listed.get("items") or [])


def running_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pods_by_node(pods: list[dict[str, Any]]) -> dict[str, str]:
    """{pod name: node} of the Running, Ready pods."""
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods if running_ready(p)}
