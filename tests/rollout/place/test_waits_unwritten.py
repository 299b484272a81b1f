"""A node this GPUDriver verified Done at an older version waits for its turn without a write
(placement.waits_unwritten): Pending in the decision and the status, its labels untouched
until it starts, straight to Checking. Every other node outside the rollout is still placed
with a write."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.reasons import WaitKind
from tests.support.rollout_samples import (
    DRIVER,
    NOW,
    OLD,
    TARGET,
    loaded_labels,
    node,
    rollout,
)


def _done(name: str, driver: str = DRIVER, version: str = OLD, **annotations: str) -> NodeFacts:
    return node(
        name,
        phase=Phase.DONE,
        version=version,
        labels=loaded_labels(version),
        annotations={names.GPUDRIVER: driver, **annotations},
    )


def _writes(decision: Decision) -> dict[str, PatchNode]:
    return {a.node: a for a in decision.actions if isinstance(a, PatchNode)}


def _one_at_a_time(**kwargs: Any) -> RolloutSettings:
    return dataclasses.replace(
        RolloutSettings(hold_after_first_node=False), max_unavailable=1, **kwargs
    )


def test_an_older_versions_done_node_starts_in_the_first_pass_straight_from_done() -> None:
    soaked = _done("a", **{names.SOAK_BASELINE: "{}"})
    decision = decide(rollout([soaked], settings=_one_at_a_time()))
    [write] = _writes(decision).values()
    # It leaves Pending (the status's phase), waiting since the rollout began: the step
    # metric observes its wait, not its time Done at the old version.
    assert (write.node, write.phase_from, write.phase_to) == ("a", Phase.PENDING, Phase.CHECKING)
    assert write.phase_since == "2026-11-29T12:00:00Z"
    assert write.labels[names.STATE_LABEL] == Phase.CHECKING.value
    assert write.annotations[names.STATE_VERSION] == TARGET
    assert write.annotations[names.SOAK_BASELINE] is None  # the old Done's record goes
    assert decision.node_phases == {"a": Phase.PENDING}
    assert decision.node_versions == {"a": TARGET}


def test_the_ones_that_wait_get_no_write_and_are_pending_in_the_status() -> None:
    nodes = [_done(name) for name in ("a", "b", "c")]
    decision = decide(rollout(nodes, settings=_one_at_a_time()))
    assert list(_writes(decision)) == ["a"]
    assert decision.node_phases == dict.fromkeys("abc", Phase.PENDING)
    assert {n: w.kind for n, w in decision.waits.items()} == dict.fromkeys(
        "bc", WaitKind.MAX_UNAVAILABLE
    )
    assert decision.status is not None
    assert decision.status["counts"][Phase.PENDING.value] == 3
    listed = {entry["name"]: entry for entry in decision.status["nodes"]}
    assert listed["b"]["phase"] == Phase.PENDING.value
    assert listed["b"]["reason"] == ""  # the old Done's reason is not this wait's
    assert listed["b"]["since"] == "2026-11-29T12:00:00Z"


def test_a_waiting_nodes_since_holds_from_pass_to_pass() -> None:
    nodes = [_done(name) for name in ("a", "b")]
    first = decide(rollout(nodes, settings=_one_at_a_time()))
    assert first.status is not None
    again = decide(
        rollout(
            nodes,
            settings=_one_at_a_time(),
            previous=first.status,
            now=NOW + datetime.timedelta(minutes=3),
        )
    )
    assert again.status is not None
    since = {e["name"]: e["since"] for e in again.status["nodes"]}
    assert since["b"] == "2026-11-29T12:00:00Z"
    # Its turn, three minutes on: it has waited since the rollout began.
    a_done = _done("a", version=TARGET)  # verified at the target meanwhile
    turn = decide(
        rollout(
            [a_done, nodes[1]],
            settings=_one_at_a_time(),
            previous=again.status,
            now=NOW + datetime.timedelta(minutes=3),
        )
    )
    start = _writes(turn)["b"]
    assert (start.phase_from, start.phase_since) == (Phase.PENDING, "2026-11-29T12:00:00Z")
    # A status about another target says nothing of this wait.
    other = decide(
        rollout(
            nodes,
            settings=_one_at_a_time(),
            previous={**first.status, "targetVersion": OLD},
            now=NOW + datetime.timedelta(minutes=3),
        )
    )
    assert other.status is not None
    assert {e["name"]: e["since"] for e in other.status["nodes"]}["b"] == "2026-11-29T12:03:00Z"


def test_nodes_it_does_not_cover_are_still_placed_with_a_write() -> None:
    nodes = [
        _done("anothers", driver="other-driver"),
        node("unrecorded", phase=Phase.DONE, version=OLD, labels=loaded_labels(OLD)),
        node(
            "failed",
            phase=Phase.FAILED,
            version=OLD,
            annotations={names.GPUDRIVER: DRIVER},
        ),
    ]
    held = dataclasses.replace(RolloutSettings(hold_after_first_node=False), paused=True)
    writes = _writes(decide(rollout(nodes, settings=held)))
    assert {n: w.phase_to for n, w in writes.items()} == dict.fromkeys(
        ("anothers", "unrecorded", "failed"), Phase.PENDING
    )


def test_removal_still_writes_why_each_node_is_pending() -> None:
    decision = decide(rollout([_done("a")], target=None))
    [write] = _writes(decision).values()
    assert write.phase_to is Phase.PENDING
    assert "unloaded through the checks" in str(write.annotations[names.REASON])


def test_one_that_goes_not_ready_while_waiting_is_blocked_from_pending() -> None:
    rebooting = dataclasses.replace(_done("a"), ready=False)
    decision = decide(rollout([rebooting], settings=_one_at_a_time()))
    [write] = _writes(decision).values()
    assert (write.phase_from, write.phase_to) == (Phase.PENDING, Phase.BLOCKED)
    assert write.phase_since == "2026-11-29T12:00:00Z"
    assert write.annotations[names.STATE_VERSION] == TARGET
