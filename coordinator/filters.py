"""Which watch events matter, and to whom: the coordinator's event filters and the mapping
from an event to the requests it makes (as KMM's internal/filter).

A watch event asks for nothing unless it changes what a reader reads: the reconciler reads a
GPUDriver's metadata and spec (its status apart), a Module's metadata and spec (KMM's status
apart), a Node's labels, kernel and taints; the rollout engine reads what the rollout keeps of
a Node, the ResourceClaims, KMM's load records (NodeModulesConfigs) and the pods that concern
it. `ChangeFilter` keeps what it last saw of each object and answers each event with its
`Requests`: a look by the rollout engine, GPUDrivers to reconcile at once or with the changes
around them. coordinator/manager.py wires the informers to it and carries the requests out.
Pure: no clients, no threads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import DRIVER_LABEL
from gpuctl.gpudriver.driver_nodes import watched_node_part
from gpuctl.gpudriver.targeting import node_kernel
from gpuctl.gpudriver.tolerations import CORDON_TAINT_KEY, node_taints
from gpuctl.rollout.input.gpu_pod_watch import concerns_rollout, pod_node

# Changes the reconciler only follows (KMM's and the rollout's node labels, the words of
# status.rollout) are one reconcile within this long: in a rollout they come several a
# second, each reconcile two fresh GETs and a plan over every node, at 300 nodes 8 a node.
# A change of a GPUDriver's own spec or metadata is reconciled at once.
FOLLOW_WITHIN_SECONDS = 1.0


def object_labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def reconciled_node_part(node: dict[str, Any]) -> tuple[dict[str, str], str, str]:
    """What the reconciler reads of a Node: its labels (TARGET_LABEL, KMM's ready and version
    labels, the user's selector), its kernel (which mapping serves it) and its taints (which
    tolerations keep KMM on it). The rollout's own state label and the cordon's taint are
    left out: the reconciler never needs them (the Module always tolerates the cordon), and
    they change several times per node in every rollout (a reconcile each, at 500 nodes 12.8
    GETs per node)."""
    labels = {k: v for k, v in object_labels(node).items() if k != names.STATE_LABEL}
    taints = [t for t in node_taints(node) if t.get("key") != CORDON_TAINT_KEY]
    return labels, node_kernel(node), json.dumps(taints, sort_keys=True)


def metadata_but_bookkeeping(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's metadata without what every write changes (resourceVersion, managedFields)."""
    meta = obj.get("metadata") or {}
    return {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}


def rollout_node_part(node: dict[str, Any]) -> dict[str, Any]:
    """What the rollout reads of a Node (the watch keeps only that, `watched_node_part`) less
    the resourceVersion: a kubelet's status heartbeat changes only what is not kept and the
    resourceVersion, and at 1,000 nodes those are about three a second (one a node at least
    every 5 minutes), each a pass over the whole fleet deciding nothing new."""
    kept = watched_node_part(node)
    return {**kept, "metadata": metadata_but_bookkeeping(kept)}


def reconciled_part(driver: dict[str, Any]) -> tuple[str, str]:
    """What the reconciler reads of a GPUDriver: its metadata but the bookkeeping every write
    changes, and its spec; and, apart, its status but status.rollout, with of status.rollout
    only what its Reconciling and Stalled conditions say (gpuctl/gpudriver/kstatus.py).

    The status is apart because the coordinator writes all of it: the reconciler what it
    finds (each follow of the fleet's changes writes it), the rollout its own words. Were it
    a change of the GPUDriver's own, each status write the reconciler makes would come back
    as a reconcile at once that finds nothing new to write: three reconciles in five in a
    1,000-node rollout (docs/benchmarks.md)."""
    meta = metadata_but_bookkeeping(driver)
    status = {k: v for k, v in (driver.get("status") or {}).items() if k != "rollout"}
    rollout = (driver.get("status") or {}).get("rollout") or {}
    words = {k: rollout.get(k) for k in ("state", "holdKind", "message")}
    own = json.dumps([meta, driver.get("spec")], sort_keys=True, default=str)
    return own, json.dumps([status, words], sort_keys=True, default=str)


def reconciled_module_part(module: dict[str, Any]) -> tuple[str, str]:
    """What the reconciler reads of a KMM Module: its metadata (owner, labels, deletion) and
    spec (drift from what the GPUDriver asks), and apart its status (how many nodes KMM
    reports loaded: the GPUDriver's status), which KMM writes as each node's load lands."""
    meta = metadata_but_bookkeeping(module)
    own = json.dumps([meta, module.get("spec")], sort_keys=True, default=str)
    return own, json.dumps(module.get("status"), sort_keys=True, default=str)


@dataclass(frozen=True)
class Requests:
    """What one watch event asks for."""

    # The rollout engine looks again.
    rollout: bool = False
    # GPUDrivers reconciled at once, and with the changes around them (FOLLOW_WITHIN_SECONDS).
    now: frozenset[str] = frozenset()
    follow: frozenset[str] = frozenset()
    # Every GPUDriver, at once or with the changes around.
    every: bool = False
    every_follow: bool = False


class ChangeFilter:
    """What was last seen of each object, and the requests each event makes of it. One
    informer's events come from one thread; each kind of object has its own record."""

    def __init__(self) -> None:
        self._node_seen: dict[str, tuple[dict[str, str], str, str]] = {}
        self._node_read_by_rollout: dict[str, dict[str, Any]] = {}
        self._drivers_seen: dict[str, tuple[str, str]] = {}
        self._modules_seen: dict[tuple[str, str], tuple[str, str]] = {}
        # Each node's KMM load records (its NodeModulesConfig's status) last seen.
        self._node_config_boots: dict[str, str] = {}

    def driver(self, kind: str, obj: dict[str, Any]) -> Requests:
        name = obj["metadata"]["name"]
        seen = None if kind == "DELETED" else reconciled_part(obj)
        before = self._drivers_seen.get(name)
        if kind == "MODIFIED" and before == seen:
            # only status.rollout changed (the rollout's own write): nothing to reconcile
            return Requests(rollout=True)
        if seen is None:
            self._drivers_seen.pop(name, None)
        else:
            self._drivers_seen[name] = seen
        if kind == "MODIFIED" and before is not None and seen is not None and before[0] == seen[0]:
            # Only the status (the reconciler's own write coming back, the rollout's words for
            # the conditions): followed with the changes around.
            return Requests(rollout=True, follow=frozenset({name}))
        # A GPUDriver going or changing its selector can end another one's conflict.
        return Requests(rollout=True, now=frozenset({name}), every=True)

    def module(self, kind: str, obj: dict[str, Any]) -> Requests:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        seen = None if kind == "DELETED" else reconciled_module_part(obj)
        before = self._modules_seen.get(key)
        if seen is None:
            self._modules_seen.pop(key, None)
        else:
            self._modules_seen[key] = seen
        if kind == "MODIFIED" and before == seen:
            return Requests(rollout=True)  # nothing the reconciler reads
        owner = object_labels(obj).get(DRIVER_LABEL)
        owners = [
            r["name"]
            for r in meta.get("ownerReferences") or []
            if r.get("kind") == names.GPUDRIVER_KIND
        ]
        # Only KMM's status of the Module (a node's load landed): followed with the changes
        # around it, as KMM writes it once or twice per node; anything else at once.
        only_status = (
            kind == "MODIFIED" and before is not None and seen is not None and before[0] == seen[0]
        )
        drivers = frozenset({*owners, *([owner] if owner else [])})
        if only_status:
            return Requests(rollout=True, follow=drivers)
        return Requests(rollout=True, now=drivers)

    def node(self, kind: str, obj: dict[str, Any]) -> Requests:
        # Every change of what the rollout reads matters to it (cordon, Ready, its labels and
        # annotations); a heartbeat does not.
        name = obj["metadata"]["name"]
        read = None if kind == "DELETED" else rollout_node_part(obj)
        rollout = False
        if kind != "MODIFIED" or self._node_read_by_rollout.get(name) != read:
            if read is None:
                self._node_read_by_rollout.pop(name, None)
            else:
                self._node_read_by_rollout[name] = read
            rollout = True
        # A change of what the reconciler reads concerns the GPUDriver the node carries
        # TARGET_LABEL for (or did), and any whose migration may involve it: every GPUDriver
        # is looked at (there are few).
        seen = None if kind == "DELETED" else reconciled_node_part(obj)
        every_follow = False
        if self._node_seen.get(name) != seen:
            if seen is None:
                self._node_seen.pop(name, None)
            else:
                self._node_seen[name] = seen
            every_follow = True
        return Requests(rollout=rollout, every_follow=every_follow)

    @staticmethod
    def claim(_kind: str, _obj: dict[str, Any]) -> Requests:
        return Requests(rollout=True)  # the rollout's checks read claims; the reconciler does not

    @staticmethod
    def images_config(_kind: str, _obj: dict[str, Any]) -> Requests:
        """Nothing to do at once: a step that waits on KMM reads it when it times out."""
        return Requests()

    def node_config(self, _kind: str, obj: dict[str, Any]) -> Requests:
        """KMM recorded a load (or its boot) on a node: a verification may be over."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        boots = repr(((obj.get("status") or {}).get("modules")) or [])
        if self._node_config_boots.get(name) != boots:
            self._node_config_boots[name] = boots
            return Requests(rollout=True)
        return Requests()

    @staticmethod
    def pod(_kind: str, obj: dict[str, Any]) -> Requests:
        # A GPU pod started, finished or went, a GPU daemon paused or came back: a drain or
        # a pause may be over, a node blocked or free. Other pods' churn concerns nobody here.
        return Requests(rollout=bool(pod_node(obj) and concerns_rollout(obj)))
