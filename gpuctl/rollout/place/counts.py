"""How many nodes are in each phase once every node is in its place (RolloutCounts): what the
fleet's holds (the failure budget), maxUnavailable and status.rollout count. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase


@dataclass(frozen=True)
class RolloutCounts:
    """The rollout's nodes counted by phase, and the counts status.rollout and the holds name."""

    # Every phase, with how many of the rollout's nodes are in it.
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
