"""What to do about one GPUDriver now: the reconcile decision as a pure function.

Given the GPUDriver, its stored Module, the Module gpuctl would write, whether KMM is
installed, the spec's problems, a conflicting GPUDriver and the unload guard's answer, `plan`
returns the writes to make (finalizer, create, update, delete), the problems to report and
the Events to record. reconciler.py gathers the inputs and carries the plan out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from coordinator.drivers.guard import REASON_ALLOCATED_CLAIM, UnloadDecision
from coordinator.drivers.module_spec import module_ref
from coordinator.drivers.status import KMM_NOT_INSTALLED, Problem, claims_block_deletion
from coordinator.drivers.validation import FieldError
from coordinator.event_notes import NORMAL, WARNING, EventNote
from gpuctl.common.names import FINALIZER

# Seconds between retries of a refused unload (watches also retry it when claims change).
BLOCKED_RETRY_SECONDS = 10.0
TERMINATING_RETRY_SECONDS = 2.0


class Action(Enum):
    ADD_FINALIZER = "add-finalizer"
    CREATE = "create-module"
    UPDATE = "update-module"
    DELETE = "delete-module"
    REMOVE_FINALIZER = "remove-finalizer"


@dataclass(frozen=True)
class PlanInput:
    driver: Mapping[str, Any]
    module_name: str
    module: Mapping[str, Any] | None
    desired: Mapping[str, Any] | None
    kmm_installed: bool
    invalid: Sequence[FieldError] = ()
    conflict_with: str | None = None
    unload: UnloadDecision = field(default_factory=lambda: UnloadDecision(frozenset(), ()))


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    problems: tuple[Problem, ...] = ()
    events: tuple[EventNote, ...] = ()
    requeue_after: float | None = None


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


def _blocked(inp: PlanInput, why: str) -> Plan:
    """The plan of a refused unload: the reason in status, a Warning Event, a retry."""
    decision = inp.unload
    problems = []
    if any(b.reason == REASON_ALLOCATED_CLAIM for b in decision.blockers):
        problems.append(Problem("UnloadBlocked", claims_block_deletion(inp.module_name)))
    others = [b for b in decision.blockers if b.reason != REASON_ALLOCATED_CLAIM]
    if others:
        problems.append(
            Problem(
                "UnloadBlocked",
                f"{module_ref(inp.module_name)} deletion blocked: "
                + "; ".join(b.message for b in others),
            )
        )
    note = EventNote(
        WARNING,
        "UnloadBlocked",
        f"refusing to {why}, which unloads the driver: {decision.summary()}",
    )
    return Plan(problems=tuple(problems), events=(note,), requeue_after=BLOCKED_RETRY_SECONDS)


def _unload(inp: PlanInput, why: str, done: str) -> Plan:
    """Delete the Module if the guard allows it."""
    if not inp.unload.allowed:
        return _blocked(inp, why)
    nodes = len(inp.unload.target_nodes)
    note = EventNote(
        NORMAL,
        "ModuleDeleting",
        f"deleting {module_ref(inp.module_name)} ({done}); KMM unloads the driver from "
        f"{nodes} node(s)",
    )
    return Plan(
        actions=(Action.DELETE,),
        events=(note,),
        requeue_after=TERMINATING_RETRY_SECONDS,
    )


def _plan_deletion(inp: PlanInput) -> Plan:
    has_finalizer = FINALIZER in (inp.driver["metadata"].get("finalizers") or [])
    module = inp.module
    if module is None or not owned_by(module, inp.driver):
        if not has_finalizer:
            return Plan()
        note = EventNote(
            NORMAL,
            "GuardReleased",
            f"{module_ref(inp.module_name)} is gone; releasing the GPUDriver",
        )
        return Plan(actions=(Action.REMOVE_FINALIZER,), events=(note,))
    if _terminating(module):
        return Plan(requeue_after=TERMINATING_RETRY_SECONDS)
    return _unload(inp, "delete the Module of a deleted GPUDriver", "GPUDriver deleted")


def _refusal(inp: PlanInput) -> Plan | None:
    """Why no Module may be written at all (KMM missing, invalid spec, conflict), or None."""
    if not inp.kmm_installed:
        return Plan(
            problems=(Problem("KMMNotInstalled", KMM_NOT_INSTALLED),),
            events=(EventNote(WARNING, "KMMNotInstalled", KMM_NOT_INSTALLED),),
        )
    if inp.invalid:
        return Plan(
            problems=tuple(Problem("InvalidSpec", str(e)) for e in inp.invalid),
            events=tuple(EventNote(WARNING, "InvalidSpec", str(e)) for e in inp.invalid),
        )
    if inp.conflict_with:
        message = (
            f"GPUDriver {inp.conflict_with} already loads the driver on nodes this GPUDriver's "
            "selector can match; no Module is written until the selectors are disjoint"
        )
        return Plan(
            problems=(Problem("Conflict", message),),
            events=(EventNote(WARNING, "Conflict", message),),
        )
    return None


def _plan_existing(inp: PlanInput, module: Mapping[str, Any], desired: Mapping[str, Any]) -> Plan:
    """Keep a stored Module in line with the desired one."""
    if _terminating(module):
        return Plan(requeue_after=TERMINATING_RETRY_SECONDS)
    if not owned_by(module, inp.driver):
        message = f"{module_ref(inp.module_name)} exists and is not owned by this GPUDriver"
        return Plan(
            problems=(Problem("ModuleNotOwned", message),),
            events=(EventNote(WARNING, "ModuleNotOwned", message),),
        )
    if _module_differs(module, desired):
        note = EventNote(NORMAL, "ModuleUpdated", f"updated {module_ref(inp.module_name)}")
        return Plan(actions=(Action.UPDATE,), events=(note,))
    return Plan()


def _plan_module(inp: PlanInput) -> Plan:
    """The Module-side plan for a live GPUDriver (finalizer handled by the caller)."""
    module, desired = inp.module, inp.desired
    if desired is None:
        if module is not None and owned_by(module, inp.driver) and not _terminating(module):
            return _unload(inp, "delete the Module", "kernelModule removed")
        return Plan(requeue_after=TERMINATING_RETRY_SECONDS if _terminating(module) else None)
    refusal = _refusal(inp)
    if refusal is not None:
        return refusal
    if module is None:
        note = EventNote(NORMAL, "ModuleCreated", f"created {module_ref(inp.module_name)}")
        return Plan(actions=(Action.CREATE,), events=(note,))
    return _plan_existing(inp, module, desired)


def plan(inp: PlanInput) -> Plan:
    """The whole decision for one GPUDriver."""
    meta = inp.driver["metadata"]
    if meta.get("deletionTimestamp"):
        return _plan_deletion(inp)
    module_plan = _plan_module(inp)
    if FINALIZER in (meta.get("finalizers") or []):
        return module_plan
    guard = EventNote(
        NORMAL,
        "GuardInstalled",
        f"added finalizer {FINALIZER}: deleting this GPUDriver waits until the driver may be "
        "unloaded",
    )
    return Plan(
        actions=(Action.ADD_FINALIZER, *module_plan.actions),
        problems=module_plan.problems,
        events=(guard, *module_plan.events),
        requeue_after=module_plan.requeue_after,
    )
