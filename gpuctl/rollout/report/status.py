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
from typing import Any

from gpuctl.common import timestamps
from gpuctl.common.names import SEVERITY, Phase
from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.place.counts import RolloutCounts
from gpuctl.rollout.reasons import (
    ROLLBACK_HOLDS,
    Hold,
    RolloutState,
    Wait,
    WaitKind,
    state_of,
)
from gpuctl.rollout.start.started import rollout_started, status_target

MAX_LISTED_NODES = 50


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
    if previous.get("targetVersion") != status_target(inp):
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
        "targetVersion": status_target(inp),
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
