"""GPUDriver status.rollout from the nodes' phases (pure; a public contract the CLI reads).

`counts` has every phase; `total` is the targeted nodes that are not Skipped; `updated` the
nodes Done at the target; `progress` is "updated/total" for the printer column; `nodes` lists
at most 50 nodes that are not Done, the worst first (Failed, Blocked, then by how far along).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.rollout.facts import RolloutInput
from gpuctl.common import names, timestamps
from gpuctl.common.names import IN_PROGRESS, SEVERITY, Phase

MAX_LISTED_NODES = 50


@dataclass(frozen=True)
class RolloutCounts:
    per_phase: Mapping[Phase, int]
    total: int
    updated: int
    failed: int
    blocked: int
    in_progress: int

    @classmethod
    def of(
        cls, phases: Mapping[str, Phase], versions: Mapping[str, str], target: str
    ) -> RolloutCounts:
        per_phase = dict.fromkeys(Phase, 0)
        for phase in phases.values():
            per_phase[phase] += 1

        def at_target(phase: Phase) -> int:
            # A node placed this pass has its version written in the same patch.
            return sum(
                1
                for name, p in phases.items()
                if p is phase and (versions.get(name) == target or phase is Phase.PENDING)
            )

        return cls(
            per_phase=per_phase,
            total=len(phases) - per_phase[Phase.SKIPPED],
            updated=at_target(Phase.DONE),
            failed=at_target(Phase.FAILED),
            blocked=per_phase[Phase.BLOCKED],
            in_progress=sum(per_phase[p] for p in IN_PROGRESS),
        )


def rollout_state(inp: RolloutInput, counts: RolloutCounts, gate: str) -> str:
    if counts.updated == counts.total and not counts.in_progress:
        return "Complete"
    if gate == "failed":
        return "Failed"
    if gate == "paused":
        return "Paused"
    if gate == "held":
        return "Held"
    return "Progressing"


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
    target = inp.target_version or ""
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
