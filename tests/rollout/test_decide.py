"""The rollout decision over all nodes: placement, order, the unavailability bound, hold,
pause, failure budget, opt-out, NotReady nodes, Blocked rechecks, and the status."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode, RequestReport
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.facts import GpuPod, NodeFacts
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.reasons import BlockKind, WaitKind
from tests.support.rollout_samples import (
    KMM,
    OLD,
    OPEN_CLIENT,
    TARGET,
    answered,
    loaded_labels,
    node,
    report,
    rollout,
    targeted,
)


def settings(**kwargs: Any) -> RolloutSettings:
    return dataclasses.replace(RolloutSettings(hold_after_first_node=False), **kwargs)


def patches(decision: Decision) -> dict[str, PatchNode]:
    out = {}
    for action in decision.actions:
        if isinstance(action, PatchNode):
            assert action.node not in out, f"two writes for {action.node} in one pass"
            out[action.node] = action
    return out


def started(decision: Decision) -> list[str]:
    return [n for n, p in patches(decision).items() if p.phase_to is Phase.CHECKING]


def pending(name: str, **kwargs: Any) -> NodeFacts:
    return node(name, phase=Phase.PENDING, **kwargs)


def done(name: str, version: str = TARGET, **kwargs: Any) -> NodeFacts:
    return node(name, phase=Phase.DONE, version=version, labels=loaded_labels(version), **kwargs)


def test_without_a_target_nodes_nothing_was_loaded_on_leave_and_there_is_no_status() -> None:
    decision = decide(rollout([node("a", wanted=False), pending("b", wanted=False)], target=None))
    [leave] = decision.actions
    assert isinstance(leave, PatchNode)
    assert leave.node == "b"
    assert leave.labels == {names.STATE_LABEL: None}
    assert leave.annotations[names.STATE_VERSION] is None
    assert decision.status is None
    assert decide(rollout([], target=None)).status is None


def test_nodes_outside_the_rollout_are_placed_first() -> None:
    nodes = [
        node("fresh"),
        done("old-done", OLD),
        node("old-failed", phase=Phase.FAILED, version=OLD),
        node("skip-me", labels={names.OPT_OUT_LABEL: "skip"}),
        node("skipped-no-more", phase=Phase.SKIPPED),
        node("hand-labelled", labels=loaded_labels()),
        node("kmm-busy", labels=targeted()),
        # Labelled at the target without the target label: the Module does not select it.
        node(
            "not-targeted", labels={KMM.version: TARGET, KMM.ready: "", KMM.version_ready: TARGET}
        ),
    ]
    placed = {n: p.phase_to for n, p in patches(decide(rollout(nodes))).items()}
    assert placed == {
        "fresh": Phase.PENDING,
        "old-done": Phase.PENDING,
        "old-failed": Phase.PENDING,
        "skip-me": Phase.SKIPPED,
        "skipped-no-more": Phase.PENDING,
        "hand-labelled": Phase.PENDING,  # verified when its turn comes, never on KMM's labels
        "kmm-busy": Phase.LOADING,
        "not-targeted": Phase.PENDING,
    }
    for patch in patches(decide(rollout(nodes))).values():
        assert patch.annotations[names.STATE_VERSION] == TARGET
        assert patch.annotations[names.GPUDRIVER] == "gpu"


def test_one_node_at_a_time_in_name_order() -> None:
    decision = decide(rollout([pending("c"), pending("a"), pending("b")]))
    assert started(decision) == ["a"]
    loading = node("a", phase=Phase.LOADING, labels=targeted())
    busy = decide(rollout([pending("c"), loading, pending("b")]))
    assert started(busy) == []


def test_max_unavailable_counts_in_progress_cordoned_and_notready_nodes() -> None:
    nodes = [
        node("a", phase=Phase.DRAINING, unschedulable=True),
        done("b", unschedulable=True),  # the admin's cordon
        done("c", ready=False),
        pending("d"),
        pending("e"),
    ]
    assert started(decide(rollout(nodes, settings=settings(max_unavailable=3)))) == []
    assert started(decide(rollout(nodes, settings=settings(max_unavailable=4)))) == ["d"]
    assert started(decide(rollout(nodes, settings=settings(max_unavailable="100%")))) == [
        "d",
        "e",
    ]


def test_an_already_cordoned_node_starts_without_using_another_slot() -> None:
    nodes = [pending("a"), pending("b", unschedulable=True)]
    assert started(decide(rollout(nodes))) == ["b"]
    # The shared start order (gpuctl rollout plan's ORDER): the cordoned node first.
    assert started(decide(rollout(nodes, settings=settings(max_unavailable=2)))) == ["b", "a"]


def test_a_node_whose_gpu_has_no_driver_starts_first_without_waiting_for_a_slot() -> None:
    """A node its agent reports without any driver in this boot (a Node registered again that
    rebooted with the in-tree xe blacklisted: KMM loads nothing there) has no capacity to take
    away: it starts at once, and says so; it counts once started, so others still wait."""
    bare = dataclasses.replace(pending("c"), driverless=True, boot_id="boot-2")
    nodes = [node("a", phase=Phase.LOADING, labels=targeted()), pending("b"), bare]
    decision = decide(rollout(nodes))
    assert started(decision) == ["c"]
    write = patches(decision)["c"]
    assert write.annotations[names.STARTED_DRIVERLESS] == "boot-2"
    assert "no driver" in str(write.annotations[names.REASON])
    assert decision.waits["b"].kind is WaitKind.MAX_UNAVAILABLE
    # Without the agent's word it waits its turn like any other.
    unknown = [node("a", phase=Phase.LOADING, labels=targeted()), pending("b"), pending("c")]
    assert started(decide(rollout(unknown))) == []
    # A lasting hold keeps it too (the admin's word is above the slot count), and it says so:
    # Blocked, naming the hold, so no node is left without a driver unexplained.
    held = decide(rollout(nodes, settings=settings(paused=True)))
    assert started(held) == []
    block = patches(held)["c"]
    assert block.phase_to is Phase.BLOCKED
    assert block.annotations[names.REASON_KIND] == BlockKind.DRIVERLESS_HELD.value
    assert "no driver" in str(block.annotations[names.REASON])
    assert "paused" in str(block.annotations[names.REASON])


def test_driverless_nodes_start_maxunavailable_at_a_time_as_on_a_fresh_install() -> None:
    """Every node without a driver (a fresh install, the in-tree xe blacklisted): they still
    go maxUnavailable at a time, by their own count, never the whole fleet cordoned at once."""
    bare = [dataclasses.replace(pending(name), driverless=True) for name in "abcd"]
    assert started(decide(rollout(bare, settings=settings(max_unavailable=2)))) == ["a", "b"]
    going = dataclasses.replace(
        node("a", phase=Phase.DRAINING, annotations={names.STARTED_DRIVERLESS: "boot-1"}),
        driverless=True,
    )
    assert started(decide(rollout([going, *bare[1:]], settings=settings(max_unavailable=2)))) == [
        "b"
    ]


def test_a_driverless_node_blocked_by_a_hold_starts_first_once_it_lifts() -> None:
    """Blocked `driverless-held`, its agent's report answered: once the pause is over it
    starts without waiting for the slot `a` holds, and still says why."""
    reason = "its GPU has no driver (KMM loads none here); paused: ..."
    bare = node(
        "c",
        phase=Phase.BLOCKED,
        reason=reason,
        annotations={names.REASON_KIND: BlockKind.DRIVERLESS_HELD.value},
    )
    unbound = report(state="NOT_LOADED", drivers={"0000:03:00.0": ""})
    bare = dataclasses.replace(answered(bare, report=unbound), driverless=True, boot_id="boot-2")
    nodes = [node("a", phase=Phase.LOADING, labels=targeted()), pending("b"), bare]
    paused = decide(rollout(nodes, settings=settings(paused=True)))
    assert started(paused) == []
    assert "c" not in patches(paused)  # no write again while held
    resumed = decide(rollout(nodes))
    assert started(resumed) == ["c"]
    assert patches(resumed)["c"].annotations[names.STARTED_DRIVERLESS] == "boot-2"


def test_percentages_round_down_but_allow_one() -> None:
    nodes = [pending(f"n{i}") for i in range(5)]
    assert len(started(decide(rollout(nodes, settings=settings(max_unavailable="40%"))))) == 2
    assert len(started(decide(rollout(nodes, settings=settings(max_unavailable="10%"))))) == 1


def test_hold_after_the_first_node_until_resumed_for_this_version() -> None:
    nodes = [done("a"), pending("b")]
    cautious = RolloutSettings()
    held = decide(rollout(nodes, settings=cautious))
    assert started(held) == []
    assert held.status is not None
    assert held.status["state"] == "Held"
    assert started(decide(rollout(nodes, settings=cautious, resumed=OLD))) == []
    assert started(decide(rollout(nodes, settings=cautious, resumed=TARGET))) == ["b"]
    # Before the first node is done there is nothing to hold.
    assert started(decide(rollout([pending("a"), pending("b")], settings=cautious))) == ["a"]


def test_pause_lets_nodes_in_progress_finish_but_starts_none() -> None:
    nodes = [node("a", phase=Phase.LOADING, labels=loaded_labels()), pending("b")]
    decision = decide(rollout(nodes, settings=settings(paused=True, max_unavailable=2)))
    assert started(decision) == []
    assert patches(decision)["a"].phase_to is Phase.VERIFYING
    assert decision.status is not None
    assert decision.status["state"] == "Paused"


def test_failure_budget_pauses_and_retried_nodes_no_longer_count() -> None:
    nodes = [node("a", phase=Phase.FAILED), pending("b")]
    decision = decide(rollout(nodes))
    assert started(decision) == []
    assert decision.status is not None
    assert decision.status["state"] == "Failed"
    assert "(failureBudget 1)" in decision.status["message"]
    assert started(decide(rollout(nodes, settings=settings(failure_budget=2)))) == ["b"]
    retried = [pending("a"), pending("b")]
    assert started(decide(rollout(retried))) == ["a"]


def test_waits_for_the_module_before_starting() -> None:
    decision = decide(rollout([pending("a")], module_ready=False))
    assert started(decision) == []
    assert decision.status is not None
    assert "recreated" in decision.status["message"]


def test_a_notready_pending_node_is_blocked_not_started() -> None:
    decision = decide(
        rollout([pending("a", ready=False), pending("b")], settings=settings(max_unavailable=2))
    )
    assert patches(decision)["a"].phase_to is Phase.BLOCKED
    assert patches(decision)["a"].annotations[names.REASON] == "node is NotReady"
    assert started(decision) == ["b"]


def test_blocked_nodes_are_rechecked_and_restart_once_clear() -> None:
    blocked = node("a", phase=Phase.BLOCKED, reason=OPEN_CLIENT.message)
    decision = decide(rollout([blocked]))
    assert decision.actions == [RequestReport("a", blocked.attempt)]
    still = answered(blocked, report=report(blockers=[OPEN_CLIENT]), finished_ago=1)
    decision = decide(rollout([still]))
    assert decision.actions == []
    assert decision.requeue_after is not None
    assert decision.requeue_after <= 30
    old = answered(blocked, report=report(blockers=[OPEN_CLIENT]), finished_ago=31)
    assert decide(rollout([old])).actions == [RequestReport("a", blocked.attempt)]
    clear = answered(blocked, report=report())
    assert started(decide(rollout([clear]))) == ["a"]


def test_blocked_nodes_do_not_hold_the_slot() -> None:
    nodes = [node("a", phase=Phase.BLOCKED), pending("b")]
    assert started(decide(rollout(nodes))) == ["b"]


def test_opt_out_of_a_node_in_progress_waits_for_it_to_finish() -> None:
    labels = {**loaded_labels(), names.OPT_OUT_LABEL: "skip"}
    facts = node("a", phase=Phase.LOADING, labels=labels)
    assert patches(decide(rollout([facts])))["a"].phase_to is Phase.VERIFYING
    idle = node("b", phase=Phase.PENDING, labels={names.OPT_OUT_LABEL: "skip"})
    assert patches(decide(rollout([idle])))["b"].phase_to is Phase.SKIPPED


def test_a_done_node_still_cordoned_by_us_is_uncordoned() -> None:
    facts = done("a", unschedulable=True, annotations={names.CORDONED_BY_GPUCTL: "true"})
    patch = patches(decide(rollout([facts])))["a"]
    assert patch.unschedulable is False
    assert patch.annotations[names.CORDONED_BY_GPUCTL] is None


def test_an_admin_cordoned_done_node_stays_cordoned() -> None:
    facts = done("a", unschedulable=True, annotations={names.CORDONED_BY_GPUCTL: "false"})
    assert patches(decide(rollout([facts]))) == {}


def test_a_new_target_takes_every_step_back_to_checking_at_it() -> None:
    for phase in (Phase.CHECKING, Phase.DRAINING, Phase.PREPARING, Phase.LOADING, Phase.VERIFYING):
        facts = node(
            "a",
            phase=phase,
            version=OLD,
            unschedulable=True,
            labels=targeted(OLD),
            annotations={
                names.CORDONED_BY_GPUCTL: "true",
                names.BOUND_BEFORE: "[]",
                names.SCALE_DOWN_DISABLED: "true",
                names.SCALE_DOWN_DISABLED_BY_GPUCTL: "true",
            },
        )
        patch = patches(decide(rollout([facts])))["a"]
        assert patch.phase_to is Phase.CHECKING, phase
        assert patch.annotations[names.STATE_VERSION] == TARGET
        # The cordon, the records and the autoscaler's hold stay; the KMM labels are left to
        # the next KMM write.
        assert patch.unschedulable is None
        assert set(patch.annotations) == {
            names.SINCE,
            names.REASON,
            names.STATE_VERSION,
            names.GPUDRIVER,
        }
        assert patch.labels == {names.STATE_LABEL: "Checking"}


def test_status_counts_every_phase_and_lists_the_worst_first() -> None:
    nodes = [
        done("a"),
        node("b", phase=Phase.FAILED, reason="KMM did not load"),
        node("c", phase=Phase.BLOCKED, reason="pid 4242 (ollama)"),
        node("d", phase=Phase.SKIPPED, labels={names.OPT_OUT_LABEL: "skip"}),
        node("e", phase=Phase.LOADING, labels={KMM.version: TARGET}),
        pending("f"),
    ]
    status = decide(rollout(nodes, settings=settings(failure_budget=3))).status
    assert status is not None
    assert status["targetVersion"] == TARGET
    assert status["total"] == 5
    assert status["updated"] == 1
    assert status["progress"] == "1/5"
    assert set(status["counts"]) == {p.value for p in Phase}
    assert status["counts"]["Failed"] == 1
    assert status["counts"]["Skipped"] == 1
    assert [n["name"] for n in status["nodes"]] == ["b", "c", "e", "f", "d"]
    assert status["nodes"][0]["reason"] == "KMM did not load"
    assert status["state"] == "Progressing"


def test_status_lists_at_most_fifty_nodes() -> None:
    nodes = [pending(f"n{i:03}") for i in range(80)]
    status = decide(rollout(nodes)).status
    assert status is not None
    assert len(status["nodes"]) == 50


def test_complete_and_its_event_once() -> None:
    decision = decide(rollout([done("a"), done("b")]))
    assert decision.status is not None
    assert decision.status["state"] == "Complete"
    assert [e.reason for e in decision.events] == ["RolloutComplete"]
    again = decide(rollout([done("a"), done("b")], previous=decision.status))
    assert again.events == []
    assert again.status is not None
    assert again.status["startedAt"] == decision.status["startedAt"]


def test_started_at_resets_for_a_new_target() -> None:
    previous = {"targetVersion": OLD, "startedAt": "2026-01-01T00:00:00Z", "state": "Complete"}
    status = decide(rollout([pending("a")], previous=previous)).status
    assert status is not None
    assert status["startedAt"] == "2026-11-29T12:00:00Z"


def test_a_bad_max_unavailable_is_reported_and_nothing_starts() -> None:
    decision = decide(rollout([pending("a")], settings=settings(max_unavailable="0%")))
    assert started(decision) == []
    assert decision.status is not None
    assert "maxUnavailable" in decision.status["message"]


def test_a_done_node_whose_target_label_was_removed_is_loaded_again_through_the_checks() -> None:
    labels = {k: v for k, v in loaded_labels().items() if k != names.TARGET_LABEL}
    facts = node("a", phase=Phase.DONE, labels=labels)
    patch = patches(decide(rollout([facts])))["a"]
    assert patch.phase_to is Phase.PENDING
    assert names.TARGET_LABEL in str(patch.annotations[names.REASON])


def test_a_blocked_node_whose_claims_are_unknown_stays_blocked() -> None:
    unknown = "cannot tell whether GPU ResourceClaims are allocated on the node: the list failed"
    blocked = node("a", phase=Phase.BLOCKED, claims_unknown="the list failed", reason=unknown)
    clear = answered(blocked, report=report())
    decision = decide(rollout([clear]))
    assert started(decision) == []
    assert decision.actions == []  # asked just now; rechecked later


def test_a_blocked_node_blocked_by_something_else_now_says_so() -> None:
    """Blocked by a pod that went, by a claim still allocated: the status names the claim."""
    was = "still on the node after 3s: GPU pods ml/trainer (evictGPUPods is off)"
    blocked = node("a", phase=Phase.BLOCKED, reason=was, claims=("ml/train-0",))
    patch = patches(decide(rollout([answered(blocked, report=report())])))["a"]
    assert patch.phase_to is Phase.BLOCKED
    reason = patch.annotations[names.REASON]
    assert reason == "waiting for allocated GPU ResourceClaims ml/train-0"
    # Blocked by what the reason already says: rechecked, not rewritten.
    same = node("a", phase=Phase.BLOCKED, reason=was, pods=(GpuPod("ml", "trainer"),))
    assert decide(rollout([answered(same, report=report())])).actions == []
    # Nothing the facts can name (no report yet): asked, not rewritten.
    quiet = node("a", phase=Phase.BLOCKED, reason=was)
    assert decide(rollout([quiet])).actions == [RequestReport("a", quiet.attempt)]


def test_the_status_names_its_version_in_every_state() -> None:
    held = decide(rollout([done("a"), pending("b")], settings=RolloutSettings())).status
    assert held is not None
    assert (held["targetVersion"], held["state"]) == (TARGET, "Held")
    assert held["message"].startswith(f"held after the first node of {TARGET}")
    paused = decide(rollout([pending("a")], settings=settings(paused=True))).status
    assert paused is not None
    assert paused["targetVersion"] == TARGET
    assert paused["message"].startswith(f"{TARGET}: paused")
    complete = decide(rollout([done("a")])).status
    assert complete is not None
    assert complete["message"] == f"all 1 nodes run {TARGET}"


def test_an_older_versions_status_is_never_taken_for_this_ones() -> None:
    # A Held status of OLD's rollout: the new rollout starts its first node, and its own
    # status (with its own start) replaces it.
    previous = {"targetVersion": OLD, "state": "Held", "startedAt": "2026-01-01T00:00:00Z"}
    decision = decide(
        rollout([pending("a"), pending("b")], settings=RolloutSettings(), previous=previous)
    )
    assert started(decision) == ["a"]
    assert decision.status is not None
    assert (decision.status["targetVersion"], decision.status["state"]) == (TARGET, "Progressing")
    assert decision.status["startedAt"] == "2026-11-29T12:00:00Z"
    assert [e.reason for e in decision.events] == ["RolloutProgressing"]
