"""What to do about one GPUDriver now: the reconcile decision as a pure function.

Given the GPUDriver, its stored Module, the Module gpuctl would write, whether KMM is served,
the spec's problems, a conflicting GPUDriver and what the Nodes' labels say (driver_nodes.py),
`plan` returns the writes to make (finalizer, Node labels, create, update, delete), the
problems to report and the Events to record. reconciler.py gathers the inputs and carries the
plan out. KMM acts on a node only after gpuctl decided, for that node, that it may, so:

- The Module never unloads a node by itself changing. The rollout moves each node in and out
  (TARGET_LABEL and KMM's version label); an update that would take a targeted node's kernel
  mapping away (KMM then unloads it at once, M5) is held until the rollout has unloaded that
  node, and so is the first switch of an older gpuctl's Module to TARGET_LABEL until the
  nodes it loaded carry TARGET_LABEL (written here, first).
- Removal is node by node: the Module and the finalizer stay while any node carries
  TARGET_LABEL=<gpudriver> or the Module's ready label; then the Module is deleted (it targets
  nothing, so KMM unloads nothing), then the finalizer goes.
- Unknown never releases: Nodes that could not be read hold every such write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from gpuctl.common.names import FINALIZER, TARGET_LABEL
from gpuctl.gpudriver import driver_nodes
from gpuctl.gpudriver.driver_nodes import DriverNodes, NodeRef
from gpuctl.gpudriver.module_spec import (
    module_ref,
    stored_mappings,
    stored_version,
    target_selector,
)
from gpuctl.gpudriver.status import KMM_NOT_INSTALLED, Problem, named
from gpuctl.gpudriver.validation import FieldError
from gpuctl.rollout.event_notes import NORMAL, WARNING, EventNote

TERMINATING_RETRY_SECONDS = 2.0
# Seconds between looks at a held update or a removal waiting for nodes (Node label changes
# also trigger one at once).
WAITING_RETRY_SECONDS = 10.0


class DriverAction(Enum):
    ADD_FINALIZER = "add-finalizer"
    TARGET_NODES = "target-nodes"
    CREATE = "create-module"
    UPDATE = "update-module"
    DELETE = "delete-module"
    REMOVE_FINALIZER = "remove-finalizer"


# Writes that can make KMM unload a node (or let the Module go): decided on Nodes read fresh.
NEEDS_FRESH_NODES = frozenset(
    {
        DriverAction.TARGET_NODES,
        DriverAction.UPDATE,
        DriverAction.DELETE,
        DriverAction.REMOVE_FINALIZER,
    }
)


@dataclass(frozen=True)
class DriverPlanInput:
    driver: Mapping[str, Any]
    module_name: str
    module: Mapping[str, Any] | None
    desired: Mapping[str, Any] | None
    kmm_installed: bool
    # None: the Nodes could not be read (`nodes_error` says why), so nothing may be released.
    nodes: DriverNodes | None
    nodes_error: str = ""
    invalid: Sequence[FieldError] = ()
    conflict_with: str | None = None
    # Why the installed KMM is not one gpuctl writes a Module for ("" when it is:
    # gpuctl/gpudriver/kmm_support.py).
    kmm_unsupported: str = ""


@dataclass(frozen=True)
class DriverPlan:
    actions: tuple[DriverAction, ...] = ()
    problems: tuple[Problem, ...] = ()
    events: tuple[EventNote, ...] = ()
    requeue_after: float | None = None
    # The Module spec CREATE or UPDATE writes.
    module_spec: Mapping[str, Any] | None = None
    # The Nodes TARGET_NODES labels TARGET_LABEL=<gpudriver>, before the Module write, and
    # the Event saying so: recorded once they are labelled, whether or not a later write of
    # the pass succeeds (the labels stay; the next pass has no node left to label).
    target_nodes: tuple[NodeRef, ...] = ()
    targeted_event: EventNote | None = None
    # Removing: the Nodes still to be unloaded node by node.
    nodes_left: tuple[str, ...] = ()

    @property
    def needs_fresh_nodes(self) -> bool:
        return any(a in NEEDS_FRESH_NODES for a in self.actions)


def _driver_name(inp: DriverPlanInput) -> str:
    return str(inp.driver["metadata"]["name"])


def _terminating(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj and obj.get("metadata", {}).get("deletionTimestamp"))


def owned_by(module: Mapping[str, Any], driver: Mapping[str, Any]) -> bool:
    uid = driver["metadata"]["uid"]
    return any(r.get("uid") == uid for r in module.get("metadata", {}).get("ownerReferences") or [])


def _module_differs(module: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    if module.get("spec") != desired["spec"]:
        return True
    labels = module.get("metadata", {}).get("labels") or {}
    wanted_labels = desired["metadata"].get("labels") or {}
    return any(labels.get(k) != v for k, v in wanted_labels.items())


def _selects_target(module: Mapping[str, Any], driver: str) -> bool:
    return (module.get("spec") or {}).get("selector") == target_selector(driver)


def _retargeted(module: Mapping[str, Any], driver: str) -> dict[str, Any]:
    """The stored Module's spec with only its selector switched to TARGET_LABEL."""
    return {**dict(module.get("spec") or {}), "selector": target_selector(driver)}


def _nodes_unknown(inp: DriverPlanInput, what: str) -> DriverPlan:
    message = f"cannot read Nodes ({inp.nodes_error or 'unknown'}): {what}"
    return DriverPlan(
        problems=(Problem("NodesUnknown", message),),
        events=(EventNote(WARNING, "NodesUnknown", message),),
        requeue_after=WAITING_RETRY_SECONDS,
    )


# -- removal: kernelModule removed, or the GPUDriver deleted ------------------------------------


def _let_go(inp: DriverPlanInput, ours: Mapping[str, Any] | None) -> DriverPlan:
    """No node is left: delete our Module (it targets nothing), then release the GPUDriver."""
    driver = _driver_name(inp)
    if ours is not None:
        if _terminating(ours):
            return DriverPlan(requeue_after=TERMINATING_RETRY_SECONDS)
        note = EventNote(
            NORMAL,
            "ModuleDeleting",
            f"deleting {module_ref(inp.module_name)}: no node carries {TARGET_LABEL}={driver} "
            "or its ready label any more, so KMM unloads nothing",
        )
        return DriverPlan(
            actions=(DriverAction.DELETE,), events=(note,), requeue_after=TERMINATING_RETRY_SECONDS
        )
    note = EventNote(
        NORMAL,
        "GuardReleased",
        f"{module_ref(inp.module_name)} is gone and no node carries {TARGET_LABEL}={driver}; "
        "releasing the GPUDriver",
    )
    return DriverPlan(actions=(DriverAction.REMOVE_FINALIZER,), events=(note,))


def _plan_removal(inp: DriverPlanInput, deleting: bool) -> DriverPlan:
    """kernelModule removed, or the GPUDriver deleted: the Module and the finalizer stay
    until every node is unloaded node by node."""
    driver = _driver_name(inp)
    ours = inp.module if inp.module is not None and owned_by(inp.module, inp.driver) else None
    releasing = deleting and FINALIZER in (inp.driver["metadata"].get("finalizers") or [])
    # A foreign Module of the same name marks its own nodes ready; ours, or one we could not
    # read (KMM not served: unknown), counts.
    count_ready = ours is not None or inp.module is None
    if ours is None and not releasing:
        left = inp.nodes.left(count_ready) if inp.nodes is not None else ()
        return DriverPlan(nodes_left=left, requeue_after=WAITING_RETRY_SECONDS if left else None)
    if inp.nodes is None:
        return _nodes_unknown(
            inp,
            f"the Module and the finalizer stay until no node carries {TARGET_LABEL}={driver}",
        )
    left = inp.nodes.left(count_ready)
    loaded = left or driver_nodes.to_target(inp.nodes)
    if ours and loaded and not _terminating(ours) and not _selects_target(ours, driver):
        # The rollout unloads a node by removing TARGET_LABEL: the Module must select it.
        return replace(_retarget(inp, ours, _retargeted(ours, driver), ()), nodes_left=left)
    if left:
        return DriverPlan(nodes_left=left, requeue_after=WAITING_RETRY_SECONDS)
    return _let_go(inp, ours)


# -- a live GPUDriver with a kernelModule ------------------------------------------------------


def _refusal(inp: DriverPlanInput) -> DriverPlan | None:
    """Why no Module may be written at all (KMM missing, invalid spec, conflict), or None."""
    if not inp.kmm_installed:
        return DriverPlan(
            problems=(Problem("KMMNotInstalled", KMM_NOT_INSTALLED),),
            events=(EventNote(WARNING, "KMMNotInstalled", KMM_NOT_INSTALLED),),
        )
    if inp.kmm_unsupported:
        return DriverPlan(
            problems=(Problem("KMMUnsupported", inp.kmm_unsupported),),
            events=(EventNote(WARNING, "KMMUnsupported", inp.kmm_unsupported),),
        )
    if inp.invalid:
        return DriverPlan(
            problems=tuple(Problem("InvalidSpec", str(e)) for e in inp.invalid),
            events=tuple(EventNote(WARNING, "InvalidSpec", str(e)) for e in inp.invalid),
        )
    if inp.conflict_with:
        message = (
            f"GPUDriver {inp.conflict_with} already loads the driver on nodes this GPUDriver's "
            "selector can match; no Module is written until the selectors are disjoint"
        )
        return DriverPlan(
            problems=(Problem("Conflict", message),),
            events=(EventNote(WARNING, "Conflict", message),),
        )
    return None


def _retarget(
    inp: DriverPlanInput,
    module: Mapping[str, Any],
    spec: Mapping[str, Any],
    held: Sequence[Problem],
) -> DriverPlan:
    """Switch a stored Module to TARGET_LABEL: first every node it loaded gets the label."""
    assert inp.nodes is not None
    driver = _driver_name(inp)
    taken = driver_nodes.foreign(inp.nodes, driver)
    if taken:
        message = (
            f"{module_ref(inp.module_name)} is loaded on "
            + ", ".join(f"node {n} (which carries {TARGET_LABEL}={v})" for n, v in taken)
            + f"; it does not select {TARGET_LABEL}={driver} until those nodes carry no other "
            "GPUDriver's label"
        )
        return DriverPlan(
            problems=(Problem("TargetLabelConflict", message), *held),
            events=(EventNote(WARNING, "TargetLabelConflict", message),),
            requeue_after=WAITING_RETRY_SECONDS,
        )
    refs = tuple(driver_nodes.ref(n) for n in driver_nodes.to_target(inp.nodes))
    targeted = None
    if refs:
        targeted = EventNote(
            NORMAL,
            "NodesTargeted",
            f"labelled {TARGET_LABEL}={driver} on the nodes "
            f"{module_ref(inp.module_name)} loaded ({named([r.name for r in refs])}), "
            "before it selects that label, so they keep the driver",
        )
    events = [
        EventNote(
            NORMAL,
            "ModuleUpdated",
            f"updated {module_ref(inp.module_name)}: it selects {TARGET_LABEL}={driver}",
        )
    ]
    events.extend(EventNote(NORMAL, "ModuleUpdateHeld", p.message) for p in held)
    return DriverPlan(
        actions=((DriverAction.TARGET_NODES,) if refs else ()) + (DriverAction.UPDATE,),
        problems=tuple(held),
        events=tuple(events),
        requeue_after=WAITING_RETRY_SECONDS if held else None,
        module_spec=spec,
        target_nodes=refs,
        targeted_event=targeted,
    )


def _holds(
    inp: DriverPlanInput, module: Mapping[str, Any], desired: Mapping[str, Any], retarget: bool
) -> list[Problem]:
    """Why the desired Module may not be written over the stored one yet (`retarget`: the
    nodes it loaded get TARGET_LABEL in the same pass, so they count as targeted)."""
    assert inp.nodes is not None
    driver = _driver_name(inp)
    ref = module_ref(inp.module_name)
    if not stored_version(module):
        # KMM refuses to set a version in place (H1); the Module must be deleted and created
        # again, which unloads every node it targets.
        return [
            Problem(
                "ModuleUpdateHeld",
                f"holding the Module update: {ref} has no version (written by an older gpuctl) "
                "and KMM refuses to add one in place; gpuctl deletes and recreates it once no "
                f"node carries {TARGET_LABEL}={driver} or its ready label (or delete it "
                "yourself once its nodes are idle: KMM then unloads them all at once)",
            )
        ]
    nodes = [*inp.nodes.targeted, *(driver_nodes.to_target(inp.nodes) if retarget else ())]
    desired_mappings = desired["spec"]["moduleLoader"]["container"]["kernelMappings"]
    lost = driver_nodes.unserved(nodes, stored_mappings(module), desired_mappings)
    if lost:
        return [
            Problem(
                "ModuleUpdateHeld",
                f"holding the Module update: nodes {named(lost)} run a kernel no new kernel "
                "mapping serves; they are unloaded node by node first",
            )
        ]
    return []


def _plan_update(
    inp: DriverPlanInput, module: Mapping[str, Any], desired: Mapping[str, Any]
) -> DriverPlan:
    """Keep a stored, owned Module in line with the desired one."""
    driver = _driver_name(inp)
    retarget = not _selects_target(module, driver)
    if not retarget and not _module_differs(module, desired):
        return DriverPlan()
    if inp.nodes is None:
        return _nodes_unknown(inp, "holding the Module update")
    held = _holds(inp, module, desired, retarget)
    loaded = inp.nodes.left() or driver_nodes.to_target(inp.nodes)
    if not stored_version(module) and not loaded:
        note = EventNote(
            NORMAL,
            "ModuleRecreating",
            f"deleting {module_ref(inp.module_name)} (it has no version) to create it again "
            f"with one: no node carries {TARGET_LABEL}={driver} or its ready label",
        )
        return DriverPlan(
            actions=(DriverAction.DELETE,), events=(note,), requeue_after=TERMINATING_RETRY_SECONDS
        )
    if retarget:
        return _retarget(
            inp, module, _retargeted(module, driver) if held else desired["spec"], held
        )
    if held:
        return DriverPlan(
            problems=tuple(held),
            events=tuple(EventNote(NORMAL, "ModuleUpdateHeld", p.message) for p in held),
            requeue_after=WAITING_RETRY_SECONDS,
        )
    note = EventNote(NORMAL, "ModuleUpdated", f"updated {module_ref(inp.module_name)}")
    return DriverPlan(actions=(DriverAction.UPDATE,), events=(note,), module_spec=desired["spec"])


def _plan_module(inp: DriverPlanInput) -> DriverPlan:
    """The Module-side plan for a live GPUDriver (finalizer handled by the caller)."""
    module, desired = inp.module, inp.desired
    if desired is None:
        return _plan_removal(inp, deleting=False)
    refusal = _refusal(inp)
    if refusal is not None:
        return refusal
    if module is None:
        note = EventNote(NORMAL, "ModuleCreated", f"created {module_ref(inp.module_name)}")
        return DriverPlan(
            actions=(DriverAction.CREATE,), events=(note,), module_spec=desired["spec"]
        )
    if _terminating(module):
        return DriverPlan(requeue_after=TERMINATING_RETRY_SECONDS)
    if not owned_by(module, inp.driver):
        message = f"{module_ref(inp.module_name)} exists and is not owned by this GPUDriver"
        return DriverPlan(
            problems=(Problem("ModuleNotOwned", message),),
            events=(EventNote(WARNING, "ModuleNotOwned", message),),
        )
    return _plan_update(inp, module, desired)


def plan(inp: DriverPlanInput) -> DriverPlan:
    """The whole decision for one GPUDriver."""
    meta = inp.driver["metadata"]
    if meta.get("deletionTimestamp"):
        return _plan_removal(inp, deleting=True)
    module_plan = _plan_module(inp)
    if FINALIZER in (meta.get("finalizers") or []):
        return module_plan
    guard = EventNote(
        NORMAL,
        "GuardInstalled",
        f"added finalizer {FINALIZER}: deleting this GPUDriver waits until no node carries "
        f"{TARGET_LABEL}={meta['name']} (each is unloaded node by node)",
    )
    return replace(
        module_plan,
        actions=(DriverAction.ADD_FINALIZER, *module_plan.actions),
        events=(guard, *module_plan.events),
    )
