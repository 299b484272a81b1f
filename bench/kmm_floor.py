"""The floor a gpuctl rollout is measured against: the same upgrade done the way KMM's docs say.

KMM's "ordered upgrade" (docs: `kmm.node.kubernetes.io/version-module.<namespace>.<module>`):
change the Module's `version` and its kernel mappings' image, then move each node's version
label to the new version; KMM unloads the old module and loads the new one there. A script
that does it in batches of maxUnavailable - label a batch, wait until KMM says every node of
it is ready at the new version, label the next - with no checks at all, no cordon, no drain,
is the least time the same KMM can take on the same nodes. `floor_upgrade` is that script; it
runs with no coordinator running (the Module is the script's while it runs).

`workload=` adds the steps of KMM's docs that a busy fleet cannot do without (3: terminate the
workload using the module on the node; 7: restore it), the way `kubectl drain --pod-selector`
and `kubectl uncordon` do them (bench.floor_workload): the batch's nodes cordoned and their
workload pods evicted, their labels moved once those pods are gone, the nodes uncordoned once
KMM says they are ready. Still no checks. The run then ends at the last uncordon.

`step_writes=True` makes the same script write each node as often as a gpuctl rollout does,
and nothing more: a bench label (`STEP_LABEL`) set to Checking, Draining and Preparing just
before its version label, to Verifying and Done once its batch is ready: six node writes a
node, as gpuctl's state label (a node Done at the older version waits without a write,
gpuctl/rollout/place/placement.py). No checks, no cordon, no drain, no agent: what those writes
alone cost KMM (its controllers reconcile a node on any label change), measured against the plain
floor in the same run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from bench.fleet_observe import NODES, WatchEvents, wait_for
from bench.floor_workload import Workload, WorkloadPods, evict_remaining, set_unschedulable
from bench.timing import Timings
from coordinator.kube.client import MERGE_PATCH, Kube, path
from gpuctl.common.names import KMM_GROUP, KMM_VERSION
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from gpuctl.rollout.input.build import kmm_labels

STEP_LABEL = "bench.gpuctl.dev/step"
BEFORE_THE_WRITE = ("Checking", "Draining", "Preparing")
AFTER_READY = ("Verifying", "Done")


def _label(kube: Kube, node: str, labels: dict[str, str]) -> None:
    kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node),
        body={"metadata": {"labels": labels}},
        content_type=MERGE_PATCH,
    )


@dataclass(frozen=True)
class FloorRun:
    seconds: float  # the first label written (or cordon) -> the last node ready (or uncordoned)
    per_node: Timings  # a node's label written -> KMM's ready label at the version
    batches: int


class ReadyWatch:
    """When each node got KMM's `version.ready` label at `version`."""

    def __init__(self, kube: Kube, selector: str, label: str, version: str) -> None:
        self._label, self._version = label, version
        self.ready: dict[str, float] = {}
        self._events = WatchEvents(kube, NODES, selector, self._apply)

    def _apply(self, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        if (meta.get("labels") or {}).get(self._label) == self._version:
            self.ready.setdefault(meta["name"], time.perf_counter())

    def stop(self) -> None:
        self._events.stop()


def _all_ready(watch: ReadyWatch, members: list[str]) -> bool:
    return all(node in watch.ready for node in members)


def floor_upgrade(
    kube: Kube,
    *,
    namespace: str,
    module: str,
    nodes: list[str],
    selector: str,
    batch: int,
    version: str,
    image: str,
    step_writes: bool = False,
    workload: Workload | None = None,
) -> FloorRun:
    """The Module to `version` with `image`, then the nodes' version labels, `batch` at a time
    (with gpuctl's seven node writes a node when `step_writes`, with the `workload` off each
    node while it changes when given: the module docstring)."""
    labels = kmm_labels(namespace, module)
    kube.request(
        "PATCH",
        path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=namespace, name=module),
        body={
            "spec": {
                "moduleLoader": {
                    "container": {
                        "version": version,
                        "kernelMappings": [{"regexp": "^.+$", "containerImage": image}],
                    }
                }
            }
        },
        content_type=MERGE_PATCH,
    )
    watch = ReadyWatch(kube, selector, labels.version_ready, version)
    pods = WorkloadPods(kube, workload) if workload is not None else None
    labelled: dict[str, float] = {}
    begin = time.perf_counter()
    restored = begin
    ordered = sorted(nodes)
    batches = [ordered[i : i + batch] for i in range(0, len(ordered), batch)]
    try:
        for members in batches:
            if pods is not None:
                set_unschedulable(kube, members, True)
                evicted: set[str] = set()
                wait_for(
                    f"the workload off {members[0]}..{members[-1]}",
                    partial(evict_remaining, kube, pods, frozenset(members), evicted),
                    600,
                    poll=0.05,
                )
            for node in members:
                for step in BEFORE_THE_WRITE if step_writes else ():
                    _label(kube, node, {STEP_LABEL: step})
                labelled[node] = time.perf_counter()
                _label(kube, node, {labels.version: version})
            wait_for(
                f"KMM ready at {version} on {members[0]}..{members[-1]}",
                partial(_all_ready, watch, members),
                3600,
                poll=0.05,
            )
            for node in members:
                for step in AFTER_READY if step_writes else ():
                    _label(kube, node, {STEP_LABEL: step})
            if pods is not None:
                set_unschedulable(kube, members, False)
                restored = time.perf_counter()
    finally:
        watch.stop()
        if pods is not None:
            pods.stop()
    seconds = max(restored, *(watch.ready[n] for n in ordered)) - begin
    per_node = Timings("label -> ready", tuple(watch.ready[n] - labelled[n] for n in ordered))
    return FloorRun(seconds, per_node, len(batches))
