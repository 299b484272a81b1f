"""Rollout-wide gates: failure budget, paused, held after the first node (one rule for the
coordinator and `gpuctl rollout plan`)."""

from __future__ import annotations

import dataclasses

from gpuctl.common.rollout_gates import FAILED, HELD, PAUSED, GateFacts, gate_words, rollout_gate

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


def gate(**changes: object) -> str:
    return rollout_gate(dataclasses.replace(MOVING, **changes))  # type: ignore[arg-type]


def test_nothing_stops_a_rollout_before_its_first_node_is_done() -> None:
    assert gate() == ""


def test_the_hold_comes_after_the_first_node_until_resumed_for_that_version() -> None:
    assert gate(updated=1) == HELD
    assert gate(updated=2) == HELD
    assert gate(updated=3) == ""  # complete
    assert gate(updated=1, resumed_version="v2") == ""
    assert gate(updated=1, resumed_version="v1") == HELD  # a resume of another version
    assert gate(updated=1, hold_after_first_node=False) == ""
    assert gate(updated=1, target_version="") == ""


def test_the_failure_budget_comes_before_paused_and_paused_before_held() -> None:
    assert gate(failed=1, paused=True, updated=1) == FAILED
    assert gate(failed=1, failure_budget=2) == ""
    assert gate(paused=True, updated=1) == PAUSED
    assert gate(paused=True, target_version="") == PAUSED


def test_each_gate_says_what_releases_it() -> None:
    assert "`gpuctl rollout retry NODE`" in gate_words(FAILED, MOVING)
    assert "`gpuctl rollout resume`" in gate_words(PAUSED, MOVING)
    assert gate_words(HELD, MOVING).startswith("held after the first node of v2")
    assert gate_words("", MOVING) == ""
