"""GPUDriver status.rollout from the nodes' phases (pure; a public contract the CLI reads).

`targetVersion` is the version the status speaks of in every state: the Module's KMM version
the wanted nodes are taken to, or names.REMOVAL_VERSION when the GPUDriver loads its driver
nowhere now (only removals are left); a status of another version is never read as this
one's. `counts` has every phase; `total` is the wanted nodes that are not Skipped; `updated`
the nodes Done at the target; `progress` is "updated/total" for the printer column; `nodes`
lists at most 50 nodes that are not Done, the worst first (Failed, Blocked, then by how far
along), those being unloaded included. `state` is Progressing, Held, Paused, Complete,
Failed, or NoNodes (a target version and no node targeted, none opted out: not Complete).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.rollout.facts import RolloutInput
from gpuctl.common import names, timestamps
from gpuctl.common.names import IN_PROGRESS, SEVERITY, Phase

MAX_LISTED_NODES = 50
# The state of a rollout whose GPUDriver targets no node at all.
NO_NODES = "NoNodes"
# The load gates of a rollback (decide.py): its nodes still moving back, or all settled.
ROLLING_BACK = "rolling back"
ROLLED_BACK = "rolled back"
# The start of the load gate's words while the Prometheus gate holds.
GATE_HOLD = "held by the gate"
# The start of the load gate's words while verified nodes soak.
SOAKING = "soaking before the next node starts"


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


# The state each gate of decide.py gives a rollout that is not Complete.
_GATE_STATES = {"failed": "Failed", "paused": "Paused", "held": "Held"}


def rollout_state(inp: RolloutInput, counts: RolloutCounts, gate: str) -> str:
    if gate == ROLLED_BACK:
        return "Paused"  # even with every node back: the failure stays until resumed
    if gate == ROLLING_BACK:
        return "Progressing"
    done = counts.updated == counts.total and not counts.in_progress and not counts.removing
    if inp.target_version and done:
        # Loaded nowhere because nothing is targeted is not a completed rollout (a selector
        # that matches no node); nodes the admin opted out (Skipped) still complete it.
        if counts.total == 0 and not counts.per_phase[Phase.SKIPPED]:
            return NO_NODES
        return "Complete"
    if gate.startswith(GATE_HOLD):
        return "Held"
    return _GATE_STATES.get(gate, "Progressing")


def _listed_nodes(inp: RolloutInput, phases: Mapping[str, Phase]) -> list[dict[str, str]]:
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
            "since": (node.since or now) if same else now,
        }
        listed.append(entry)
    return listed


def rollout_status(
    inp: RolloutInput,
    phases: Mapping[str, Phase],
    counts: RolloutCounts,
    message: str,
    gate: str = "",
) -> dict[str, Any]:
    previous = inp.previous_status
    target = inp.target_version or names.REMOVAL_VERSION
    started = previous.get("startedAt") if previous.get("targetVersion") == target else None
    return {
        "targetVersion": target,
        "state": rollout_state(inp, counts, gate),
        "message": message,
        "total": counts.total,
        "updated": counts.updated,
        "progress": f"{counts.updated}/{counts.total}",
        "counts": {phase.value: counts.per_phase[phase] for phase in Phase},
        "nodes": _listed_nodes(inp, phases),
        "startedAt": started or timestamps.format_seconds(inp.now),
    }


def resumed_version(driver: Mapping[str, Any]) -> str:
    annotations = (driver.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(names.RESUMED_VERSION, ""))
