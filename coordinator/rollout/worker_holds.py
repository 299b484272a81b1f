"""The namespace's KMM worker hold list, made of the Nodes, one write a pass (I/O).

The chart's worker hold guard (coordinator/policies/worker_hold_guard.py) refuses KMM's worker
Pods on the nodes an annotation of the coordinator's namespace lists (names.KMM_WORKER_HOLDS).
The list is not kept by adding and removing names: it is derived, after each pass's node
writes, from the Nodes that carry names.KMM_WORKER_HELD (worker_hold.held_nodes), and written
once when it differs. So the node's own write comes first (a hold whose node write failed is
never left behind), a node deleted and re-registered under its name (`kubectl delete node`,
an IP-named cloud node) or let go by `gpuctl driver abandon` leaves the list with its
annotation, and a pass holding or letting go several nodes writes the list once.

A list that could not be written is said: `trouble` goes into the next pass's input (the
GPUDriver's status.rollout.workerHoldsTrouble, its WorkerHoldsWritten condition, a Loading
node's timeout naming a listed hold) and the controller records a Warning Event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from gpuctl.common import names
from gpuctl.rollout.step.worker_hold import held_in, held_nodes, hold_list

log = logging.getLogger(__name__)

# Seconds before a list write that raced or failed is tried again.
RETRY_SECONDS = 1.0


class WorkerHolds:
    """Keeps names.KMM_WORKER_HOLDS on `namespace` equal to the held Nodes (`sync`)."""

    def __init__(self, kube: KubeApi, namespace: str, *, enabled: bool) -> None:
        self._kube = kube
        self._namespace = namespace
        self._enabled = enabled
        # The list as last read or written (None: not known yet).
        self._known: frozenset[str] | None = None
        # Why the list could not be written ("" when it says what the Nodes say).
        self.trouble = ""

    def listed(self) -> frozenset[str]:
        """The nodes the namespace's list named when last read or written."""
        return self._known or frozenset()

    def sync(self, nodes: Iterable[Mapping[str, Any]]) -> float | None:
        """Writes the list the Nodes make, when it differs; seconds until a retry, or None."""
        wanted = held_nodes(nodes)
        if not self._enabled:
            if wanted:
                log.warning(
                    "without --kmm-worker-hold, KMM's worker is not held off the nodes",
                    extra={"nodes": sorted(wanted)},
                )
            return None
        if wanted == self._known:
            return None
        namespace_path = path("", "v1", "namespaces", name=self._namespace)
        try:
            namespace = self._kube.request("GET", namespace_path)
            meta = namespace.get("metadata") or {}
            listed = held_in((meta.get("annotations") or {}).get(names.KMM_WORKER_HOLDS))
            if listed != wanted:
                body = {
                    "metadata": {
                        "resourceVersion": meta.get("resourceVersion"),
                        "annotations": {names.KMM_WORKER_HOLDS: hold_list(wanted) or None},
                    }
                }
                self._kube.request("PATCH", namespace_path, body=body, content_type=MERGE_PATCH)
                log.info(
                    "worker holds written",
                    extra={"held": sorted(wanted - listed), "let_go": sorted(listed - wanted)},
                )
        except KubeError as err:
            if not err.conflict:
                self.trouble = (
                    f"the worker holds on namespace {self._namespace} could not be written: {err}"
                )
                log.warning("could not write the worker holds", extra={"error": str(err)})
            return RETRY_SECONDS
        self._known, self.trouble = wanted, ""
        return None
