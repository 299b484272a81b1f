"""What a GPUDriver's Nodes say about its Module, read from their labels (pure).

The Module selects the Nodes carrying TARGET_LABEL=<gpudriver>, which the rollout writes
(coordinator/rollout) and, migrating a Module an older gpuctl wrote, this reconciler (`to_target`);
KMM marks the Nodes where it loaded the Module with its ready label,
and the rollout writes KMM's version label on the Nodes it lets load a version. From those
labels the reconcile plan learns:

- which Nodes are still to be unloaded node by node (`left`: targeted, or still marked ready)
  before the Module may be deleted and the finalizer released;
- which Nodes must get TARGET_LABEL before a Module written by an older gpuctl (the user's
  selector) first selects TARGET_LABEL (`to_target`): KMM would otherwise stop targeting them
  all at once and unload them (M1/M5), and which carry another GPUDriver's TARGET_LABEL
  (`foreign`: one label value per Node, so that is a conflict to report, not overwrite);
- which targeted Nodes a Module update would take the kernel mapping from (`unserved`): KMM
  checks "no mapping → remove" before the version (M5), so it would unload them at once.
(No update drops a node by its taints: the Module always tolerates every taint,
gpuctl.gpudriver.tolerations.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.common.names import TARGET_LABEL
from gpuctl.common.nodes import node_labels, node_name
from gpuctl.gpudriver.targeting import mapping_for, node_kernel


@dataclass(frozen=True)
class NodeRef:
    """A Node as read: its name and the resourceVersion a write to it is conditioned on."""

    name: str
    resource_version: str


@dataclass(frozen=True)
class DriverNodes:
    """The Nodes one GPUDriver's plan looks at, classified by their labels."""

    # Carrying TARGET_LABEL=<gpudriver>: KMM targets them.
    targeted: tuple[Mapping[str, Any], ...]
    # Carrying the Module's ready label: KMM loaded the Module there (name only).
    ready: tuple[str, ...]
    # Carrying the Module's ready or version label: loaded, or being loaded, by the Module.
    marked: tuple[Mapping[str, Any], ...]

    def left(self, count_ready: bool = True) -> tuple[str, ...]:
        """The Nodes still to unload: targeted, or (`count_ready`) still marked ready."""
        names = {node_name(n) for n in self.targeted}
        if count_ready:
            names.update(self.ready)
        return tuple(sorted(names))


def _raw_kernel(node: Mapping[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion") or "")


def planned_part(node: Mapping[str, Any]) -> dict[str, Any]:
    """What the plan reads of a Node: name, resourceVersion, labels and kernel (a Node read
    for the plan is kept as this; at 5,000 Nodes a full copy per selector is hundreds of MB)."""
    meta = node.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(meta.get("labels") or {}),
        },
        "status": {"nodeInfo": {"kernelVersion": _raw_kernel(node)}},
    }


def watched_node_part(node: dict[str, Any]) -> dict[str, Any]:
    """What the coordinator keeps of a Node it watches: what the plan (labels, kernel), the
    known issues (nodeInfo) and the rollout (annotations, cordon, taints, Ready) read.

    Capacity, addresses, images, volumes and the conditions' messages and heartbeats are
    dropped: on a real node they are most of it (the image list alone is often tens of KB),
    and kwok's heartbeats change nothing kept."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    kept_meta = {key: meta[key] for key in _KEPT_METADATA if key in meta}
    kept_spec = {key: spec[key] for key in ("unschedulable", "taints") if key in spec}
    conditions = [
        {key: c[key] for key in ("type", "status", "reason") if key in c}
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    ]
    return {
        "metadata": kept_meta,
        "spec": kept_spec,
        "status": {"conditions": conditions, "nodeInfo": dict(status.get("nodeInfo") or {})},
    }


_KEPT_METADATA = (
    "name",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
)


def driver_nodes(
    nodes: Iterable[Mapping[str, Any]], driver: str, ready_label: str, version_label: str
) -> DriverNodes:
    """Classify `nodes` (any that may matter; the rest are ignored) for GPUDriver `driver`."""
    targeted, ready, marked = [], [], []
    for node in sorted(_newest(nodes).values(), key=node_name):
        labels = node_labels(node)
        if labels.get(TARGET_LABEL) == driver:
            targeted.append(node)
        if ready_label in labels:
            ready.append(node_name(node))
        if ready_label in labels or version_label in labels:
            marked.append(node)
    return DriverNodes(tuple(targeted), tuple(ready), tuple(marked))


def _resource_version(node: Mapping[str, Any]) -> int:
    try:
        return int(str((node.get("metadata") or {}).get("resourceVersion") or "0"))
    except ValueError:
        return 0


def _newest(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """One copy per Node (several label-selected reads may each return it): the newest."""
    out: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        name = node_name(node)
        if name not in out or _resource_version(node) > _resource_version(out[name]):
            out[name] = node
    return out


def ref(node: Mapping[str, Any]) -> NodeRef:
    return NodeRef(node_name(node), str((node.get("metadata") or {}).get("resourceVersion") or ""))


def to_target(facts: DriverNodes) -> tuple[Mapping[str, Any], ...]:
    """Nodes the Module loaded (or is loading) that carry no TARGET_LABEL: they get
    TARGET_LABEL=<driver> before the Module first selects it."""
    return tuple(n for n in facts.marked if TARGET_LABEL not in node_labels(n))


def foreign(facts: DriverNodes, driver: str) -> tuple[tuple[str, str], ...]:
    """(node, value) of Nodes the Module loaded that carry another GPUDriver's TARGET_LABEL."""
    out = []
    for node in facts.marked:
        value = node_labels(node).get(TARGET_LABEL)
        if value is not None and value != driver:
            out.append((node_name(node), value))
    return tuple(out)


def unserved(
    nodes: Iterable[Mapping[str, Any]],
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
) -> tuple[str, ...]:
    """Nodes whose kernel the `before` kernel mappings serve and the `after` ones do not.

    A Node neither serves is left out: the update changes nothing for it (KMM already loads
    nothing there).
    """
    out = []
    for node in nodes:
        kernel = node_kernel(node)
        if mapping_for(kernel, before) is not None and mapping_for(kernel, after) is None:
            out.append(node_name(node))
    return tuple(sorted(set(out)))
