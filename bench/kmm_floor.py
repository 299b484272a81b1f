"""The floor a gpuctl rollout is measured against: the same upgrade done the way KMM's docs say.

KMM's "ordered upgrade" (docs: `kmm.node.kubernetes.io/version-module.<namespace>.<module>`):
change the Module's `version` and its kernel mappings' image, then move each node's version
label to the new version; KMM unloads the old module and loads the new one there. A script
that does it in batches of maxUnavailable - label a batch, wait until KMM says every node of
it is ready at the new version, label the next - with no checks at all, no cordon, no drain,
is the least time the same KMM can take on the same nodes. `floor_upgrade` is that script; it
runs with no coordinator running (the Module is the script's while it runs).

`step_writes=True` makes the same script write each node as often as a gpuctl rollout does,
and nothing more: a bench label (`STEP_LABEL`) set to Checking, Draining and Preparing just
before its version label, to Verifying and Done once its batch is ready: six node writes a
node, as gpuctl's state label (a node Done at the older version waits without a write,
gpuctl/rollout/placement.py). No checks, no cordon, no drain, no agent: what those writes alone
cost KMM (its controllers reconcile a node on any label change), measured against the plain
floor in the same run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from bench.fleet_observe import NODES, WatchEvents, wait_for
from bench.timing import Timings
from coordinator.kube.client import MERGE_PATCH, Kube, path
from gpuctl.common.names import KMM_GROUP, KMM_VERSION
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from gpuctl.rollout.rollout_input import kmm_labels

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
    seconds: float  # the first label written -> the last node ready
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
) -> FloorRun:
    """The Module to `version` with `image`, then the nodes' version labels, `batch` at a time
    (with gpuctl's seven node writes a node when `step_writes`: the module docstring)."""
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
    labelled: dict[str, float] = {}
    begin = time.perf_counter()
    ordered = sorted(nodes)
    batches = [ordered[i : i + batch] for i in range(0, len(ordered), batch)]
    try:
        for members in batches:
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
    finally:
        watch.stop()
    seconds = max(watch.ready[n] for n in ordered) - begin
    per_node = Timings("label -> ready", tuple(watch.ready[n] - labelled[n] for n in ordered))
    return FloorRun(seconds, per_node, len(batches))
