"""Steps 3 and 7 of KMM's ordered upgrade, as the floor's script does them: the workload off a
batch's nodes before their version label moves, and back once KMM has loaded the new version.

KMM's docs (docs/mkdocs/documentation/ordered_upgrade.md in its source): "3. Terminate any
workload using the kmod on the node being upgraded" before the label that unloads the module,
and "7. Restore any workload that would leverage the kernel module on the node" after it is
loaded again. On a node whose GPU is in use the unload fails ("Module xe is in use") unless
step 3 came first, so a floor without it is not an upgrade a busy fleet can do. The script does
it the way an admin's `kubectl drain --pod-selector` does, and nothing more: cordon the node
(so the workload's controller does not put the pod straight back), evict each of the
workload's pods on it (the Eviction API), wait until they are gone; step 7 uncordons. No
checks of any kind: no agent, no look at `/dev/dri`, no verification.

`WorkloadPods` follows the workload's pods by node (a watch, deletions included);
`evict_remaining` evicts what is still on a batch's nodes and says whether anything is left.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from bench.fleet_observe import WatchEvents
from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from gpuctl.rollout.input.facts import GpuPod
from gpuctl.rollout.input.gpu_pod_watch import eviction


@dataclass(frozen=True)
class Workload:
    """The pods that use the module: those of `namespace` matching the label `selector`."""

    namespace: str
    selector: str


@dataclass(frozen=True)
class PodOnNode:
    namespace: str
    name: str
    uid: str
    node: str


class PodsByNode(Protocol):
    def on(self, nodes: Collection[str]) -> list[PodOnNode]: ...


def _pod(obj: dict[str, Any]) -> PodOnNode:
    meta = obj.get("metadata") or {}
    return PodOnNode(
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        str((obj.get("spec") or {}).get("nodeName") or ""),
    )


class WorkloadPods:
    """The workload's pods that exist now, by node, from a watch begun at construction (the
    pods already there included); `stop` ends it."""

    def __init__(self, kube: KubeApi, workload: Workload) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, PodOnNode] = {}
        self._events = WatchEvents(
            kube,
            path("", "v1", "pods", namespace=workload.namespace),
            workload.selector,
            self._keep,
            deleted=self._forget,
            existing=True,
        )

    def _keep(self, obj: dict[str, Any]) -> None:
        pod = _pod(obj)
        with self._lock:
            self._pods[pod.uid] = pod

    def _forget(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._pods.pop(_pod(obj).uid, None)

    def on(self, nodes: Collection[str]) -> list[PodOnNode]:
        with self._lock:
            return [pod for pod in self._pods.values() if pod.node in nodes]

    def stop(self) -> None:
        self._events.stop()


def set_unschedulable(kube: KubeApi, nodes: Iterable[str], unschedulable: bool) -> None:
    """Cordons (True: step 3's first move) or uncordons (False: step 7) each of `nodes`."""
    for node in nodes:
        kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node),
            body={"spec": {"unschedulable": unschedulable}},
            content_type=MERGE_PATCH,
        )


def evict_remaining(
    kube: KubeApi, pods: PodsByNode, nodes: Collection[str], evicted: set[str]
) -> bool:
    """Evicts each of the workload's pods on `nodes` not yet in `evicted` (their uids, added to
    it); True once none of the workload's pods is left on them."""
    left = pods.on(nodes)
    for pod in left:
        if pod.uid in evicted:
            continue
        evicted.add(pod.uid)
        try:
            kube.request(
                "POST",
                path(
                    "", "v1", "pods", namespace=pod.namespace, name=pod.name, subresource="eviction"
                ),
                body=eviction(GpuPod(pod.namespace, pod.name)),
            )
        except KubeError as err:
            if not err.not_found:  # gone already is what step 3 wants
                raise
    return not left
