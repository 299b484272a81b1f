"""GPUDriver status.rollout from the nodes' phases (pure; a public contract the CLI reads).

`targetVersion` is the version the status speaks of in every state: the Module's KMM version
the wanted nodes are taken to, or names.REMOVAL_VERSION when the GPUDriver loads its driver
nowhere now (only removals are left); a status of another version is never read as this
one's. `counts` has every phase; `total` is the wanted nodes that are not Skipped; `updated`
the nodes Done at the target; `progress` is "updated/total" for the printer column; `nodes`
lists at most 50 nodes that are not Done (a Blocked one with its reason's `kind`; one that
could have started and did not with why, `waiting` and `waitKind`), the worst
first (Failed, Blocked, then by how far along), those being unloaded included. `state` is a
gpuctl.rollout.reasons.RolloutState: Complete once every wanted node is Done at the target, else
the state of what holds the rollout (`holdKind`, a HoldKind, absent when nothing does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names, timestamps
from gpuctl.common.names import IN_PROGRESS, SEVERITY, Phase
from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.reasons import (
    ROLLBACK_HOLDS,
    Hold,
    RolloutState,
    Wait,
    WaitKind,
    state_of,
)

MAX_LISTED_NODES = 50


@dataclass(frozen=True)
class RolloutCounts:
    per_phase: Mapping[Phase, int]
    # Wanted nodes not Skipped, and those of them Done at the target.
    total: int
    updated: int
    # Nodes Failed at their version (the target, or the removal path's).
    failed: int
    blocked: int
    in_progress: int
    # Nodes on the removal path (not Skipped).
    removing: int

    @classmethod
    def of(
        cls,
        phases: Mapping[str, Phase],
        versions: Mapping[str, str],
        targets: Mapping[str, str],
    ) -> RolloutCounts:
        """`versions`: each node's version once this pass's writes are made; `targets`: the
        version each node is taken to (the target, or names.REMOVAL_VERSION)."""
        per_phase = dict.fromkeys(Phase, 0)
        for phase in phases.values():
            per_phase[phase] += 1
        counted = [name for name, phase in phases.items() if phase is not Phase.SKIPPED]
        removal = {name for name in counted if targets[name] == names.REMOVAL_VERSION}

        def at_target(phase: Phase, among: list[str]) -> int:
            return sum(
                1 for name in among if phases[name] is phase and versions[name] == targets[name]
            )

        loads = [name for name in counted if name not in removal]
        return cls(
            per_phase=per_phase,
            total=len(loads),
            updated=at_target(Phase.DONE, loads),
            failed=at_target(Phase.FAILED, counted),
            blocked=per_phase[Phase.BLOCKED],
            in_progress=sum(per_phase[p] for p in IN_PROGRESS),
            removing=len(removal),
        )


def rollout_state(inp: RolloutInput, counts: RolloutCounts, hold: Hold | None) -> RolloutState:
    if hold is not None and hold.kind in ROLLBACK_HOLDS:
        return state_of(hold)  # Paused even with every node back, until resumed
    done = counts.updated == counts.total and not counts.in_progress and not counts.removing
    if inp.target_version and done:
        # Loaded nowhere because nothing is targeted is not a completed rollout (a selector
        # that matches no node); nodes the admin opted out (Skipped) still complete it.
        if counts.total == 0 and not counts.per_phase[Phase.SKIPPED]:
            return RolloutState.NO_NODES
        return RolloutState.COMPLETE
    return state_of(hold)


def _listed_since(inp: RolloutInput, name: str, phase: Phase, now: str) -> str:
    """Since when a node whose labels do not say its phase (one placed in this pass, or
    Pending without a write: placement.waits_unwritten) has been in it: as the last status
    listed it in that phase for the same target, else now. Never now again on every pass: the
    status would change with each one."""
    previous = inp.previous_status
    if previous.get("targetVersion") != _status_target(inp):
        return now
    for entry in previous.get("nodes") or ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            if entry.get("phase") == phase.value and isinstance(entry.get("since"), str):
                return str(entry["since"])
            break
    return now


def _listed_nodes(
    inp: RolloutInput, phases: Mapping[str, Phase], waits: Mapping[str, Wait]
) -> list[dict[str, str]]:
    by_name = {n.name: n for n in inp.nodes}
    not_done = [name for name, phase in phases.items() if phase is not Phase.DONE]
    not_done.sort(key=lambda name: (SEVERITY.index(phases[name]), name))
    listed = []
    now = timestamps.format_seconds(inp.now)
    for name in not_done[:MAX_LISTED_NODES]:
        node = by_name[name]
        same = node.phase is phases[name]
        entry = {
            "name": name,
            "phase": phases[name].value,
            "reason": node.reason if same else "",
            "since": (node.since or now) if same else _listed_since(inp, name, phases[name], now),
        }
        if same and node.phase is Phase.BLOCKED:
            entry["kind"] = node.reason_kind.value
        wait = waits.get(name)
        if wait is not None and wait.kind is not WaitKind.BLOCKED:
            # Why it did not start in this pass (a Blocked node's reason says its own).
            entry["waiting"] = wait.words
            entry["waitKind"] = wait.kind.value
        listed.append(entry)
    return listed


def rollout_started(inp: RolloutInput) -> str:
    """When the rollout of this pass's target began (RFC 3339): as the last status says, or
    now for a target it was not about."""
    previous = inp.previous_status
    same = previous.get("targetVersion") == _status_target(inp)
    started = previous.get("startedAt") if same else None
    return str(started or timestamps.format_seconds(inp.now))


def _status_target(inp: RolloutInput) -> str:
    """The version status.rollout is about: the target, or the removal path's."""
    return inp.target_version or names.REMOVAL_VERSION


def rollout_status(
    inp: RolloutInput,
    phases: Mapping[str, Phase],
    counts: RolloutCounts,
    message: str,
    hold: Hold | None = None,
    *,
    waits: Mapping[str, Wait] | None = None,
) -> dict[str, Any]:
    state = rollout_state(inp, counts, hold)
    status: dict[str, Any] = {
        "targetVersion": _status_target(inp),
        "state": state.value,
        "message": message,
        "total": counts.total,
        "updated": counts.updated,
        "progress": f"{counts.updated}/{counts.total}",
        "counts": {phase.value: counts.per_phase[phase] for phase in Phase},
        "nodes": _listed_nodes(inp, phases, waits or {}),
        "startedAt": rollout_started(inp),
    }
    if hold is not None and state is not RolloutState.COMPLETE:
        status["holdKind"] = hold.kind.value
    if inp.worker_holds_trouble:
        status["workerHoldsTrouble"] = inp.worker_holds_trouble
        status["message"] = f"{message}; {inp.worker_holds_trouble}"
    return status


def resumed_version(driver: Mapping[str, Any]) -> str:
    annotations = (driver.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(names.RESUMED_VERSION, ""))
