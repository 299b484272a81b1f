"""What KMM would do to one node for a GPUDriver's pending change, and why, in words (pure).

gpuctl owns per-node targeting: the KMM Module selects exactly the nodes carrying
`gpuctl.dev/driver-target=<gpudriver>` (names.TARGET_LABEL), a label the rollout writes
(with KMM's version label, after the node's checks) and removes (in the unload write); the
drivers reconciler writes it only onto nodes a Module of an older gpuctl loaded already. The
user's selector and kernel mappings only say which nodes are *wanted*
(gpuctl.gpudriver.targeting, the rule the coordinator uses). So the nodes KMM would touch are the
wanted ones and the ones carrying the label, each with one action:

- load    wanted, not carrying the label: the first install on the node (or carrying it
          without KMM's version label: nothing of the Module is loaded there). If `xe` is live
          there, in-tree or not, KMM's loader first removes it (`inTreeModulesToRemove`, KMM's
          worker): that is an unload.
- reload  carrying the label, with KMM's version label at another version than the Module's:
          a version or configuration change, which KMM carries out as an unload, then a load
          (KMM's NodeModulesConfig reconciler: the old config's unload before the new load).
- unload  carrying the label but not wanted: the GPUDriver is being deleted, its kernelModule
          was removed, the node left the selector (which label), or no kernel mapping serves
          its kernel.
- none    at the Module's version already (Done).

A node neither wanted nor carrying the label is not touched by KMM at all (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common import names
from gpuctl.common.names import Phase, parse_phase
from gpuctl.common.nodes import node_labels
from gpuctl.gpudriver.targeting import mapping_for, node_kernel, node_selector, wants_node

# The report's module states in which the module is in the kernel and removable.
_IN_KERNEL = (pb.Module.LIVE, pb.Module.COMING, pb.Module.GOING)
_PROVENANCE = {pb.Module.IN_TREE: "in-tree ", pb.Module.OUT_OF_TREE: "out-of-tree "}


class TouchKind(StrEnum):
    LOAD = "load"
    RELOAD = "reload"
    UNLOAD = "unload"
    NONE = "none"


@dataclass(frozen=True)
class Touch:
    """What KMM would do to the node, and why, in words."""

    action: TouchKind
    change: str
    # The rollout has already labelled the node for the target: KMM is at work on it and the
    # node's checks are behind it.
    released: bool = False


@dataclass(frozen=True)
class Target:
    """The GPUDriver's side of the plan: what it wants, and the Module's version."""

    driver: str
    spec: Mapping[str, Any]
    deleting: bool
    # The Module's `spec.moduleLoader.container.version`; None when there is no Module yet.
    version: str | None
    # KMM's version label on nodes for this Module; "" when no Module is named.
    version_label: str

    @property
    def module_name(self) -> str:
        """The kernel module, for words (the agent's report names the one it sees)."""
        return str((self.spec.get("kernelModule") or {}).get("moduleName") or "xe")


def module_ref(driver: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the Module the GPUDriver's `status.module` names, if any."""
    parts = str((driver.get("status") or {}).get("module") or "").split("/")
    return (parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def module_version(module: Mapping[str, Any]) -> str:
    loader = (module.get("spec") or {}).get("moduleLoader") or {}
    return str((loader.get("container") or {}).get("version") or "")


def target_of(driver: Mapping[str, Any], module: Mapping[str, Any] | None) -> Target:
    meta = driver.get("metadata") or {}
    ref = module_ref(driver)
    if module is not None:
        module_meta = module.get("metadata") or {}
        ref = (str(module_meta.get("namespace", "")), str(module_meta.get("name", "")))
    return Target(
        driver=str(meta.get("name", "")),
        spec=driver.get("spec") or {},
        deleting=bool(meta.get("deletionTimestamp")),
        version=module_version(module) if module is not None else None,
        version_label=names.kmm_version_label(*ref) if ref is not None else "",
    )


def touch(target: Target, node: Mapping[str, Any], report: pb.NodeReport | None) -> Touch | None:
    """What KMM would do to `node`; None when it would not touch it.

    `report` is the node's agent report when it is fresh (None: unknown), read only to say
    whether a first load would first unload a live `xe`.
    """
    labels = node_labels(node)
    carries = labels.get(names.TARGET_LABEL) == target.driver
    if target.deleting or not wants_node(target.spec, node):
        return Touch(TouchKind.UNLOAD, unwanted_because(target, node)) if carries else None
    current = labels.get(target.version_label, "") if carries and target.version_label else ""
    if target.version is None or not current:
        return Touch(TouchKind.LOAD, _load_words(target, carries) + _live_words(target, report))
    if current != target.version:
        return Touch(TouchKind.RELOAD, f"from {current} to {target.version}: unload, then load")
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    done = parse_phase(labels.get(names.STATE_LABEL)) is Phase.DONE
    if done and annotations.get(names.STATE_VERSION) == target.version:
        return Touch(TouchKind.NONE, f"at {target.version}")
    return Touch(TouchKind.LOAD, f"labelled for {target.version}: KMM is loading it", released=True)


def _load_words(target: Target, carries: bool) -> str:
    if not carries:
        return "first install"
    if target.version is None:
        return "loads once the coordinator creates the Module"
    return f"carries {names.TARGET_LABEL} but no KMM version label: loads {target.version}"


def _live_words(target: Target, report: pb.NodeReport | None) -> str:
    """What KMM's loader does first to a live module (rule W1), in words ("" if none)."""
    if report is None:
        return f"; unknown whether a live {target.module_name} must be removed first"
    module = report.module
    if module.state not in _IN_KERNEL:
        return ""
    provenance = _PROVENANCE.get(module.provenance, "")
    name = module.name or target.module_name
    return f"; KMM's loader first removes the live {provenance}{name} (an unload)"


def unwanted_because(target: Target, node: Mapping[str, Any]) -> str:
    """Why the GPUDriver does not want its driver on `node`, in words."""
    if target.deleting:
        return "the GPUDriver is being deleted"
    kernel_module = target.spec.get("kernelModule") or {}
    if not kernel_module:
        return "the GPUDriver has no kernelModule any more"
    labels = node_labels(node)
    misses = [
        f"{key}={value} (the node has {_has(labels, key)})"
        for key, value in node_selector(target.spec).items()
        if labels.get(key) != value
    ]
    if misses:
        return "left the node selector: " + ", ".join(misses)
    kernel = node_kernel(node)
    if not kernel:
        return "its kernel is unknown (status.nodeInfo.kernelVersion is empty)"
    if mapping_for(kernel, kernel_module.get("kernelMappings") or []) is None:
        return f"no kernel mapping for its kernel {kernel}"
    return "not wanted by the GPUDriver"


def _has(labels: Mapping[str, str], key: str) -> str:
    return f"{key}={labels[key]}" if key in labels else "no such label"
