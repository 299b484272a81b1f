"""Why a node that could start did not: one answer per node (starts.why_waiting), which the
pass acts on and status.rollout lists (`waiting`, `waitKind`) beside the node."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.prometheus import GateResult
from gpuctl.rollout.input.settings import PrometheusGateSettings, RolloutSettings
from gpuctl.rollout.reasons import HoldKind, WaitKind
from tests.support.rollout_samples import NOW, OPEN_CLIENT, TARGET, node, rollout

FREE = RolloutSettings(hold_after_first_node=False)


def pending(name: str, **facts: Any) -> Any:
    return node(name, phase=Phase.PENDING, version=TARGET, **facts)


def listed(decision: Any) -> dict[str, dict[str, str]]:
    return {entry["name"]: entry for entry in decision.status["nodes"]}


def test_a_node_over_max_unavailable_says_so_in_the_status() -> None:
    decision = decide(rollout([pending("a"), pending("b")], settings=FREE))
    started = [a.node for a in decision.actions if isinstance(a, PatchNode)]
    assert started == ["a"]
    assert set(decision.waits) == {"b"}
    assert decision.waits["b"].kind is WaitKind.MAX_UNAVAILABLE
    entry = listed(decision)["b"]
    assert entry["waitKind"] == "MaxUnavailable"
    assert entry["waiting"] == "maxUnavailable (1) nodes are unavailable already"
    assert "waiting" not in listed(decision)["a"]


def test_a_held_rollout_names_the_hold_per_node() -> None:
    paused = dataclasses.replace(FREE, paused=True)
    decision = decide(rollout([pending("a")], settings=paused))
    wait = decision.waits["a"]
    assert wait.kind is WaitKind.HELD
    assert wait.hold is not None
    assert wait.hold.kind is HoldKind.PAUSED
    assert listed(decision)["a"]["waitKind"] == "Held"


def test_a_not_ready_node_waits_and_is_blocked_with_its_kind() -> None:
    decision = decide(rollout([pending("a", ready=False)], settings=FREE))
    assert decision.waits["a"].kind is WaitKind.NODE_NOT_READY
    [write] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert write.phase_to is Phase.BLOCKED


def test_a_node_waiting_for_a_fresh_gate_answer_asks_for_it() -> None:
    gate = PrometheusGateSettings("http://prometheus:9090", "ALERTS")
    settings = dataclasses.replace(FREE, prometheus_gate=gate)
    stale = GateResult(True, "", NOW - timedelta(seconds=3))
    inp = dataclasses.replace(rollout([pending("a")], settings=settings), gate=stale)
    decision = decide(inp)
    assert decision.waits["a"].kind is WaitKind.GATE_NOT_ASKED
    assert decision.ask_gate


def test_a_blocked_node_waits_on_its_own_blocker_and_its_reason_says_it() -> None:
    blocked = node("a", phase=Phase.BLOCKED, reason=OPEN_CLIENT.message)
    decision = decide(rollout([blocked], settings=FREE))
    assert decision.waits["a"].kind is WaitKind.BLOCKED
    entry = listed(decision)["a"]
    assert entry["reason"] == OPEN_CLIENT.message
    assert "waiting" not in entry
