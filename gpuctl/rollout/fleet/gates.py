"""Rollout-wide gates: may a GPUDriver's rollout start any new node now? (plain data, no I/O)

Three gates stop new nodes whatever each node's own checks say: too many nodes Failed at
the target (`rollout.failureBudget`), `rollout.paused`, and the hold after the first node
(`rollout.holdAfterFirstNode`, released by `gpuctl rollout resume` for that version). The
coordinator's decision and `gpuctl rollout plan` both ask this one function.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.rollout.reasons import Hold, HoldKind


@dataclass(frozen=True)
class GateFacts:
    failed: int  # nodes Failed at the target
    failure_budget: int
    paused: bool
    hold_after_first_node: bool
    target_version: str  # "" when there is no target (nothing to roll out)
    resumed_version: str  # the version `gpuctl rollout resume` released, "" for none
    updated: int  # nodes Done at the target
    total: int  # nodes targeted


def rollout_gate(facts: GateFacts) -> Hold | None:
    """The gate that stops new nodes, with what releases it; None when they may start."""
    if facts.failed >= facts.failure_budget:
        return Hold(
            HoldKind.FAILURE_BUDGET,
            f"failed: {facts.failed} node(s) Failed at the target (failureBudget "
            f"{facts.failure_budget}); fix them, then `gpuctl rollout retry --node NODE`",
        )
    if facts.paused:
        return Hold(
            HoldKind.PAUSED,
            "paused (rollout.paused): no node starts until `gpuctl rollout resume`",
        )
    if (
        facts.target_version
        and facts.hold_after_first_node
        and facts.resumed_version != facts.target_version
        and 1 <= facts.updated < facts.total
    ):
        return Hold(
            HoldKind.AFTER_FIRST_NODE,
            f"held after the first node of {facts.target_version}: check it, then "
            "`gpuctl rollout resume`",
        )
    return None
