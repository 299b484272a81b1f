"""What KMM decides for one Module on one Node: pure functions over plain data.

The I/O side is ``kmm_emulator.py``; its docstring lists the KMM behaviour reproduced and where
it is documented. Objects are the API's JSON (camelCase dicts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP = "kmm.sigs.x-k8s.io"
VERSION = "v1beta1"
PLURAL = "modules"
FINALIZER = "kmm.node.kubernetes.io/module-finalizer"
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def ready_label(namespace: str, name: str) -> str:
    return f"kmm.node.kubernetes.io/{namespace}.{name}.ready"


def version_ready_label(namespace: str, name: str) -> str:
    return f"kmm.node.kubernetes.io/{namespace}.{name}.version.ready"


def version_module_label(namespace: str, name: str) -> str:
    return f"kmm.node.kubernetes.io/version-module.{namespace}.{name}"


@dataclass(frozen=True)
class KernelMapping:
    literal: str
    regexp: str
    container_image: str


@dataclass(frozen=True)
class ModuleView:
    """The parts of a Module that decide where and what KMM loads."""

    namespace: str
    name: str
    selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    version: str
    kernel_mappings: tuple[KernelMapping, ...]
    deleting: bool

    @classmethod
    def from_object(cls, module: Mapping[str, Any]) -> ModuleView:
        metadata = module["metadata"]
        spec = module.get("spec", {})
        container = spec.get("moduleLoader", {}).get("container", {})
        default_image = container.get("containerImage", "")
        mappings = tuple(
            KernelMapping(
                literal=m.get("literal", ""),
                regexp=m.get("regexp", ""),
                container_image=m.get("containerImage") or default_image,
            )
            for m in container.get("kernelMappings", [])
        )
        return cls(
            namespace=metadata["namespace"],
            name=metadata["name"],
            selector=dict(spec.get("selector") or {}),
            tolerations=tuple(spec.get("tolerations") or ()),
            version=container.get("version", "") or "",
            kernel_mappings=mappings,
            deleting=bool(metadata.get("deletionTimestamp")),
        )


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    kernel_version: str

    @classmethod
    def from_object(cls, node: Mapping[str, Any]) -> NodeView:
        return cls(
            name=node["metadata"]["name"],
            labels=dict(node["metadata"].get("labels") or {}),
            taints=tuple(node.get("spec", {}).get("taints") or ()),
            kernel_version=node.get("status", {}).get("nodeInfo", {}).get("kernelVersion", ""),
        )


@dataclass(frozen=True)
class Loaded:
    """A module build loaded on a node: the Module version and the image it came from."""

    version: str
    container_image: str


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration-matches-taint rule (empty effect or key with Exists match all)."""
    effect = toleration.get("effect", "")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key", "")
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if not key and operator != "Exists":
        return False
    if operator == "Exists":
        return True
    return bool(toleration.get("value", "") == taint.get("value", ""))


def is_targeted(module: ModuleView, node: NodeView) -> bool:
    """Selector labels all match, and every NoSchedule/NoExecute taint is tolerated."""
    if any(node.labels.get(key) != value for key, value in module.selector.items()):
        return False
    return all(
        any(tolerates(toleration, taint) for toleration in module.tolerations)
        for taint in node.taints
        if taint.get("effect") in SCHEDULING_EFFECTS
    )


def kernel_mapping(module: ModuleView, kernel_version: str) -> KernelMapping | None:
    """The first mapping whose literal equals, or whose regexp matches, the node's kernel."""
    kernel = kernel_version.removesuffix("+")
    for mapping in module.kernel_mappings:
        if mapping.literal and mapping.literal == kernel:
            return mapping
        if mapping.regexp and re.search(mapping.regexp, kernel):
            return mapping
    return None


def next_worker_label(
    module_label: str | None, worker_label: str | None, loaded: Loaded | None
) -> str | None:
    """KMM's internal per-node worker label after one step of its version-label controller.

    It follows the admin's ``version-module`` label: removed when that label is removed or
    changes value, and set to the new value once the old module is unloaded.
    """
    if module_label is None or (worker_label is not None and worker_label != module_label):
        return None
    if worker_label is None:
        return module_label if loaded is None else None
    return worker_label


@dataclass(frozen=True)
class Decision:
    """What KMM wants on a node: ``load`` a build, unload (``load`` None), or ``keep``."""

    load: Loaded | None
    keep: bool = False


KEEP = Decision(load=None, keep=True)
UNLOAD = Decision(load=None)


def decide(module: ModuleView, node: NodeView, worker_label: str | None) -> Decision:
    """Where KMM's module reconciler puts (or leaves) the module on this node."""
    if module.deleting or not is_targeted(module, node):
        return UNLOAD
    mapping = kernel_mapping(module, node.kernel_version)
    if mapping is None:
        return UNLOAD
    target = Decision(load=Loaded(module.version, mapping.container_image))
    if not module.version:
        return target
    if worker_label is None:
        return UNLOAD
    return target if worker_label == module.version else KEEP


def readiness_labels(module: ModuleView, loaded: Loaded | None) -> dict[str, str | None]:
    """The node labels KMM keeps for this module (None: label absent)."""
    if loaded is None:
        return {
            ready_label(module.namespace, module.name): None,
            version_ready_label(module.namespace, module.name): None,
        }
    return {
        ready_label(module.namespace, module.name): "",
        version_ready_label(module.namespace, module.name): loaded.version or None,
    }


@dataclass(frozen=True)
class LoaderStatus:
    nodes_matching_selector: int
    desired: int
    available: int

    def as_status(self) -> dict[str, int]:
        return {
            "nodesMatchingSelectorNumber": self.nodes_matching_selector,
            "desiredNumber": self.desired,
            "availableNumber": self.available,
        }


def loader_status(
    module: ModuleView,
    nodes: Sequence[NodeView],
    decisions: Mapping[str, Decision],
    loaded: Mapping[str, Loaded | None],
) -> LoaderStatus:
    """``status.moduleLoader``: targeted nodes, nodes configured to run it, nodes running it."""
    matching = sum(1 for node in nodes if is_targeted(module, node))
    desired = available = 0
    for node in nodes:
        decision = decisions.get(node.name, UNLOAD)
        current = loaded.get(node.name)
        if decision.load is not None:
            desired += 1
            available += int(current == decision.load)
        elif decision.keep and current is not None:
            desired += 1
            available += 1
    return LoaderStatus(matching, desired, available)
