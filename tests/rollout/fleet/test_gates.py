"""Rollout-wide gates: failure budget, paused, held after the first node (one rule for the
coordinator and `gpuctl rollout plan`)."""

from __future__ import annotations

import dataclasses

from gpuctl.rollout.fleet.gates import GateFacts, rollout_gate
from gpuctl.rollout.reasons import HoldKind

FAILED, HELD, PAUSED = HoldKind.FAILURE_BUDGET, HoldKind.AFTER_FIRST_NODE, HoldKind.PAUSED

MOVING = GateFacts(
    failed=0,
    failure_budget=1,
    paused=False,
    hold_after_first_node=True,
    target_version="v2",
    resumed_version="",
    updated=0,
    total=3,
)


def gate(**changes: object) -> HoldKind | None:
    hold = rollout_gate(dataclasses.replace(MOVING, **changes))  # type: ignore[arg-type]
    return hold.kind if hold is not None else None


def test_nothing_stops_a_rollout_before_its_first_node_is_done() -> None:
    assert gate() is None


def test_the_hold_comes_after_the_first_node_until_resumed_for_that_version() -> None:
    assert gate(updated=1) == HELD
    assert gate(updated=2) == HELD
    assert gate(updated=3) is None  # complete
    assert gate(updated=1, resumed_version="v2") is None
    assert gate(updated=1, resumed_version="v1") == HELD  # a resume of another version
    assert gate(updated=1, hold_after_first_node=False) is None
    assert gate(updated=1, target_version="") is None


def test_the_failure_budget_comes_before_paused_and_paused_before_held() -> None:
    assert gate(failed=1, paused=True, updated=1) == FAILED
    assert gate(failed=1, failure_budget=2) is None
    assert gate(paused=True, updated=1) == PAUSED
    assert gate(paused=True, target_version="") == PAUSED


def words(**changes: object) -> str:
    hold = rollout_gate(dataclasses.replace(MOVING, **changes))  # type: ignore[arg-type]
    assert hold is not None
    return hold.words


def test_each_gate_says_what_releases_it() -> None:
    assert "`gpuctl rollout retry --node NODE`" in words(failed=1)
    assert "`gpuctl rollout resume`" in words(paused=True)
    assert words(updated=1).startswith("held after the first node of v2")
