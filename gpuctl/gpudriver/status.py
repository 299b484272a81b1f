"""GPUDriver status, computed from what the reconciler saw and did (pure, clock passed in).

The fields follow the reference operator: `kmmStatus` is `<available>/<desired>` module
loaders, `N/A` without a `kernelModule` (or without KMM), `Removing` while the driver is
unloaded node by node and the Module then deleted (the Ready condition says how many nodes are
left), and `Recreating` while a Module the GPUDriver still asks for is being deleted (it is
created again once gone).
`errors` carries the reference's messages, recomputed every time so a stale one disappears
once it is no longer true; `warnings` the reference's known issues met on the targeted nodes
(known_issues.py), also in the `KnownIssues` condition; a GPUDriver that targets no node is
not Ready (`NoNodesTargeted`). `Reconciling` and `Stalled` say where the rollout is in the
kstatus convention (kstatus.py). Conditions keep their lastTransitionTime while their status
does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.common import timestamps
from gpuctl.common.names import KMM_GROUP
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from gpuctl.gpudriver.kstatus import condition as _condition
from gpuctl.gpudriver.kstatus import rollout_conditions
from gpuctl.gpudriver.module_spec import module_ref, ready_label

KMM_NOT_INSTALLED = "KMM is not installed in the cluster."
NOT_APPLICABLE = "N/A"
REMOVING = "Removing"
RECREATING = "Recreating"
# status fields written by the rollout engine (coordinator/rollout), left alone here.
ROLLOUT_OWNED_STATUS = frozenset({"rollout", "revisions"})
# Nodes named in a status message; the rest are counted.
NAMED_NODES = 5
# The condition that lists the reference's known issues met on the targeted nodes, and the
# reason of the one that makes the GPUDriver not Ready (known_issues.py says them).
KNOWN_ISSUES = "KnownIssues"
NO_NODES_TARGETED = "NoNodesTargeted"


def loader_not_available(module: str, available: int, desired: int) -> str:
    return f"module loader not fully available ({available}/{desired}) for {module_ref(module)}"


def stuck_deletion(module: str, since: str) -> str:
    return f"{module_ref(module)} deletion pending since {since}"


def named(nodes: Sequence[str]) -> str:
    """'a, b, c', or 'a, b, c, d, e and 3 more' past NAMED_NODES."""
    shown = ", ".join(nodes[:NAMED_NODES])
    more = len(nodes) - NAMED_NODES
    return f"{shown} and {more} more" if more > 0 else shown


def unloading(nodes_left: Sequence[str]) -> str:
    """The removal's progress: the nodes the rollout still unloads, one by one."""
    noun = "node" if len(nodes_left) == 1 else "nodes"
    return (
        f"unloading node by node: {len(nodes_left)} {noun} left ({named(nodes_left)}); each "
        "node's state is in status.rollout"
    )


@dataclass(frozen=True)
class Problem:
    """A reason the GPUDriver is not as asked; `message` goes to status.errors verbatim."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """What the reconciler found and did in one pass, the input of the status."""

    driver: Mapping[str, Any]
    namespace: str
    module_name: str
    wants_module: bool
    kmm_installed: bool
    module: Mapping[str, Any] | None
    problems: Sequence[Problem] = field(default_factory=tuple)
    # Removing: the nodes still carrying TARGET_LABEL or the ready label (unloaded one by one).
    nodes_left: Sequence[str] = field(default_factory=tuple)
    # Seconds after which a Module still being deleted is reported as stuck.
    stuck_after_seconds: float = 120.0
    # The reference's known issues on the targeted nodes (known_issues.py); status.warnings.
    warnings: Sequence[Problem] = field(default_factory=tuple)


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def loader_counts(module: Mapping[str, Any]) -> tuple[int, int]:
    loader = (module.get("status") or {}).get("moduleLoader") or {}
    return int(loader.get("availableNumber") or 0), int(loader.get("desiredNumber") or 0)


def kmm_status(obs: Observation) -> str:
    """The kmmStatus column."""
    module = obs.module
    deleting_driver = _deleting(obs.driver)
    if module is not None and module.get("metadata", {}).get("deletionTimestamp"):
        return RECREATING if obs.wants_module and not deleting_driver else REMOVING
    if (module is not None or obs.nodes_left) and (deleting_driver or not obs.wants_module):
        return REMOVING
    if not obs.wants_module or not obs.kmm_installed:
        return NOT_APPLICABLE
    if module is None:
        return "0/0"
    available, desired = loader_counts(module)
    return f"{available}/{desired}"


def _seconds_between(start: str, end: str) -> float:
    return (timestamps.parse(end) - timestamps.parse(start)).total_seconds()


def errors(obs: Observation, now: str) -> list[str]:
    """status.errors: the reconciler's problems, then the Module's own state."""
    out = [p.message for p in obs.problems]
    if obs.wants_module and not obs.kmm_installed and KMM_NOT_INSTALLED not in out:
        out.insert(0, KMM_NOT_INSTALLED)
    module = obs.module
    if module is not None:
        since = module.get("metadata", {}).get("deletionTimestamp")
        if since and _seconds_between(since, now) >= obs.stuck_after_seconds:
            out.append(stuck_deletion(obs.module_name, since))
        elif not since and obs.wants_module and not _deleting(obs.driver):
            available, desired = loader_counts(module)
            if available != desired:
                out.append(loader_not_available(obs.module_name, available, desired))
    return out


def conditions(obs: Observation, kmm: str, errs: list[str]) -> list[dict[str, Any]]:
    generation = int(obs.driver.get("metadata", {}).get("generation") or 0)
    first_problem = obs.problems[0] if obs.problems else None
    nowhere = next((w for w in obs.warnings if w.reason == NO_NODES_TARGETED), None)
    if not obs.kmm_installed and obs.wants_module:
        first_problem = Problem("KMMNotInstalled", KMM_NOT_INSTALLED)
    if kmm in (REMOVING, RECREATING):
        progress = [unloading(obs.nodes_left)] if obs.nodes_left else []
        message = "; ".join([*progress, *errs]) or kmm
        ready = _condition("Ready", False, kmm, message, generation)
    elif errs:
        reason = first_problem.reason if first_problem else "ModuleNotAvailable"
        ready = _condition("Ready", False, reason, "; ".join(errs), generation)
    elif not obs.wants_module:
        ready = _condition("Ready", True, "NoKernelModule", "kernelModule is not set", generation)
    elif nowhere is not None:
        ready = _condition("Ready", False, nowhere.reason, nowhere.message, generation)
    else:
        ready = _condition("Ready", True, "ModuleAvailable", f"module loader {kmm}", generation)
    if first_problem:
        degraded = _condition(
            "Degraded",
            True,
            first_problem.reason,
            "; ".join([first_problem.message] + [p.message for p in obs.problems[1:]]),
            generation,
        )
    else:
        degraded = _condition("Degraded", False, "AsExpected", "", generation)
    if obs.warnings:
        issues = _condition(
            KNOWN_ISSUES,
            True,
            obs.warnings[0].reason,
            "; ".join(w.message for w in obs.warnings),
            generation,
        )
    else:
        issues = _condition(KNOWN_ISSUES, False, "NoneFound", "", generation)
    rollout = (obs.driver.get("status") or {}).get("rollout") or {}
    return [ready, degraded, issues, *rollout_conditions(rollout, generation)]


def _carry_transition_times(
    new: list[dict[str, Any]], previous: Sequence[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    before = {c.get("type"): c for c in previous}
    for cond in new:
        old = before.get(cond["type"])
        same = old is not None and old.get("status") == cond["status"]
        cond["lastTransitionTime"] = old.get("lastTransitionTime", now) if same and old else now
    return new


def compute_status(obs: Observation, now: str) -> dict[str, Any]:
    """The whole status object; `now` is an RFC 3339 UTC timestamp with seconds."""
    previous = obs.driver.get("status") or {}
    kmm = kmm_status(obs)
    errs = errors(obs, now)
    status: dict[str, Any] = {
        "observedGeneration": int(obs.driver.get("metadata", {}).get("generation") or 0),
        "kmmStatus": kmm,
        "errors": errs,
        "warnings": [w.message for w in obs.warnings],
        "conditions": _carry_transition_times(
            conditions(obs, kmm, errs), previous.get("conditions") or [], now
        ),
    }
    if obs.wants_module:
        status["module"] = f"{KMM_PLURAL}.{KMM_GROUP}/{obs.namespace}/{obs.module_name}"
        status["readyLabel"] = ready_label(obs.namespace, obs.module_name)
    return status


def status_changed(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when writing `new` would change anything (ignores missing-vs-empty errors, and
    the fields the rollout engine owns)."""
    current = {k: v for k, v in (current or {}).items() if k not in ROLLOUT_OWNED_STATUS}
    for listed in ("errors", "warnings"):
        if not current.get(listed):
            current[listed] = []
    return current != dict(new)
