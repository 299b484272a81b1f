"""The removal path: a node the GPUDriver no longer wants, on which KMM loads the driver for
it, is unloaded through the same checks (fresh report, pods, claims, cordon, drain, prepare),
one write removes the target and version labels, the unload is verified, and the node leaves
the rollout; one where nothing was loaded just leaves."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode, RequestReport
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.loading import step_loading
from gpuctl.rollout.step.preparing import step_preparing
from gpuctl.rollout.step.verifying import step_verifying
from tests.support.rollout_samples import (
    KMM,
    NONE,
    OLD,
    OPEN_CLIENT,
    TARGET,
    answered,
    loaded_labels,
    node,
    report,
    rollout,
)

POOL = "gpu"  # the GPUDriver
TARGET_LABEL = names.TARGET_LABEL


def settings(**kwargs: Any) -> RolloutSettings:
    return dataclasses.replace(RolloutSettings(hold_after_first_node=False), **kwargs)


def patches(decision: Decision) -> dict[str, PatchNode]:
    return {a.node: a for a in decision.actions if isinstance(a, PatchNode)}


def only_patch(actions: Sequence[object]) -> PatchNode:
    assert len(actions) == 1, actions
    patch = actions[0]
    assert isinstance(patch, PatchNode)
    return patch


def unwanted(name: str = "n1", **kwargs: Any) -> NodeFacts:
    return node(name, wanted=False, **kwargs)


# -- placement ----------------------------------------------------------------------------


def test_an_unwanted_node_kmm_loads_for_the_gpudriver_goes_pending_for_removal() -> None:
    done = unwanted(phase=Phase.DONE, version=OLD, labels=loaded_labels(OLD))
    patch = patches(decide(rollout([done])))["n1"]
    assert patch.phase_to is Phase.PENDING
    assert patch.annotations[names.STATE_VERSION] == NONE
    assert "no longer wants the node" in str(patch.annotations[names.REASON])
    # Without a target at all (no kernelModule, or the GPUDriver deleted): the same.
    patch = patches(decide(rollout([done], target=None)))["n1"]
    assert patch.annotations[names.STATE_VERSION] == NONE
    assert "loads its driver nowhere now" in str(patch.annotations[names.REASON])


def test_an_unwanted_node_where_nothing_was_loaded_leaves_the_rollout() -> None:
    cordoned = unwanted(
        phase=Phase.DRAINING,
        unschedulable=True,
        annotations={names.CORDONED_BY_GPUCTL: "true", names.BOUND_BEFORE: "[]"},
    )
    patch = patches(decide(rollout([cordoned])))["n1"]
    assert patch.phase_to is None
    assert patch.labels == {names.STATE_LABEL: None}
    assert patch.unschedulable is False
    for key in (names.STATE_VERSION, names.CORDONED_BY_GPUCTL, names.BOUND_BEFORE):
        assert patch.annotations[key] is None
    assert patch.event is not None
    assert patch.event.reason == "RolloutReleased"
    admin = unwanted(phase=Phase.PENDING, unschedulable=True)
    assert patches(decide(rollout([admin])))["n1"].unschedulable is None


def test_an_unwanted_node_preparation_may_have_changed_fails_for_the_admin() -> None:
    preparing = unwanted(phase=Phase.PREPARING, unschedulable=True)
    patch = patches(decide(rollout([preparing], settings=settings(disable_idle_vfs=True))))["n1"]
    assert patch.phase_to is Phase.FAILED
    assert names.PREPARE_CHANGES in str(patch.annotations[names.REASON])
    failed = unwanted(phase=Phase.FAILED)
    assert patches(decide(rollout([failed]))) == {}


def test_an_opted_out_unwanted_node_keeps_its_driver() -> None:
    labels = {**loaded_labels(OLD), names.OPT_OUT_LABEL: "skip"}
    facts = unwanted(phase=Phase.DONE, version=OLD, labels=labels)
    patch = patches(decide(rollout([facts])))["n1"]
    assert patch.phase_to is Phase.SKIPPED
    skipped = unwanted(phase=Phase.SKIPPED, version=NONE, labels=labels)
    decision = decide(rollout([skipped]))
    assert patches(decision) == {}
    assert decision.status is not None
    assert decision.status["counts"]["Skipped"] == 1


# -- starting -----------------------------------------------------------------------------


def pending_removal(name: str, **kwargs: Any) -> NodeFacts:
    return unwanted(name, phase=Phase.PENDING, version=NONE, labels=loaded_labels(OLD), **kwargs)


def started(decision: Decision) -> list[str]:
    return [n for n, p in patches(decision).items() if p.phase_to is Phase.CHECKING]


def test_removals_do_not_wait_for_the_module_or_the_hold_but_do_for_pause_and_failures() -> None:
    nodes = [pending_removal("a")]
    assert started(decide(rollout(nodes, module_ready=False))) == ["a"]
    held = [node("done", phase=Phase.DONE, labels=loaded_labels()), node("b", phase=Phase.PENDING)]
    decision = decide(rollout([*held, *nodes], settings=RolloutSettings(max_unavailable=2)))
    assert started(decision) == ["a"]
    assert decision.status is not None
    assert decision.status["state"] == "Held"
    assert started(decide(rollout(nodes, settings=settings(paused=True)))) == []
    failed = node("f", phase=Phase.FAILED, version=NONE, wanted=False, labels=loaded_labels(OLD))
    assert started(decide(rollout([failed, *nodes], settings=settings(max_unavailable=2)))) == []


def test_removals_count_against_max_unavailable_like_loads() -> None:
    removing = unwanted(
        "a", phase=Phase.DRAINING, version=NONE, labels=loaded_labels(OLD), unschedulable=True
    )
    loads = [node("b", phase=Phase.PENDING)]
    assert started(decide(rollout([removing, *loads]))) == []
    assert started(decide(rollout([removing, *loads], settings=settings(max_unavailable=2)))) == [
        "b"
    ]


def test_an_idle_node_is_unloaded_while_a_busy_one_waits_blocked() -> None:
    busy = unwanted("a", phase=Phase.BLOCKED, version=NONE, labels=loaded_labels(OLD))
    busy = answered(busy, report=report(blockers=[OPEN_CLIENT]), finished_ago=1)
    idle = pending_removal("b")
    decision = decide(rollout([busy, idle]))
    assert started(decision) == ["b"]
    clear = answered(
        unwanted("a", phase=Phase.BLOCKED, version=NONE, labels=loaded_labels(OLD)),
        report=report(),
    )
    assert started(decide(rollout([clear]))) == ["a"]


# -- the steps ----------------------------------------------------------------------------


def test_checking_a_busy_node_blocks_it_before_any_cordon() -> None:
    facts = answered(
        unwanted(phase=Phase.CHECKING, version=NONE, labels=loaded_labels(OLD)),
        report=report(blockers=[OPEN_CLIENT]),
    )
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.STATE_VERSION] == NONE
    assert "pid 4242 (ollama)" in str(patch.annotations[names.REASON])
    assert patch.unschedulable is None
    assert TARGET_LABEL not in patch.labels


def preparing(**kwargs: Any) -> NodeFacts:
    return unwanted(
        phase=Phase.PREPARING,
        version=NONE,
        labels=loaded_labels(OLD),
        unschedulable=True,
        annotations={names.CORDONED_BY_GPUCTL: "true"},
        **kwargs,
    )


def test_the_unload_write_removes_the_target_and_version_labels_in_one_write() -> None:
    facts = answered(preparing(), report=report())
    patch = only_patch(step_preparing(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.LOADING
    assert patch.annotations[names.STATE_VERSION] == NONE
    assert patch.labels == {names.STATE_LABEL: "Loading", TARGET_LABEL: None, KMM.version: None}
    assert "KMM unloads xe" in str(patch.annotations[names.REASON])


def test_another_gpudrivers_target_label_is_left_alone() -> None:
    labels = {**loaded_labels(OLD), TARGET_LABEL: "other"}
    facts = answered(preparing(), report=report())
    facts = dataclasses.replace(facts, labels={**labels, names.STATE_LABEL: "Preparing"})
    patch = only_patch(step_preparing(rollout([facts]), facts).actions)
    assert TARGET_LABEL not in patch.labels
    assert patch.labels[KMM.version] is None


def test_the_unload_write_is_never_decided_on_an_old_answer() -> None:
    stale = answered(preparing(), report=report(), finished_ago=6)
    assert step_preparing(rollout([stale]), stale).actions == [RequestReport("n1", stale.attempt)]
    fresh = answered(preparing(), report=report(), finished_ago=4)
    assert only_patch(step_preparing(rollout([fresh]), fresh).actions).phase_to is Phase.LOADING


def test_unknown_claims_block_the_unload() -> None:
    facts = answered(preparing(claims_unknown="resourceclaims are not served"), report=report())
    patch = only_patch(step_preparing(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == (
        "cannot tell whether GPU ResourceClaims are allocated on the node: "
        "resourceclaims are not served"
    )


def loading(**kwargs: Any) -> NodeFacts:
    labels = {KMM.ready: "", KMM.version_ready: OLD}
    return unwanted(phase=Phase.LOADING, version=NONE, labels=labels, **kwargs)


def test_loading_waits_for_kmm_to_drop_its_ready_label_then_verifies() -> None:
    waiting = loading()
    step = step_loading(rollout([waiting]), waiting)
    assert step.actions == [RequestReport(waiting.name, waiting.attempt)]  # until KMM acts
    assert step.wake_in is not None
    gone = unwanted(phase=Phase.LOADING, version=NONE)
    patch = only_patch(step_loading(rollout([gone]), gone).actions)
    assert patch.phase_to is Phase.VERIFYING
    assert patch.annotations[names.STATE_VERSION] == NONE
    late = loading(since=601)
    patch = only_patch(step_loading(rollout([late]), late).actions)
    assert patch.phase_to is Phase.FAILED
    assert "KMM did not unload xe within 10m" in str(patch.annotations[names.REASON])


def test_a_target_label_put_back_by_someone_while_unloading_is_removed_only_after_checks() -> None:
    facts = unwanted(phase=Phase.LOADING, version=NONE, labels={TARGET_LABEL: POOL})
    patch = only_patch(step_loading(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.CHECKING
    assert TARGET_LABEL not in patch.labels
    assert "was put back while KMM unloaded" in str(patch.annotations[names.REASON])


def verifying(**kwargs: Any) -> NodeFacts:
    return unwanted(
        phase=Phase.VERIFYING,
        version=NONE,
        unschedulable=True,
        annotations={names.CORDONED_BY_GPUCTL: "true", names.BOUND_BEFORE: "[]"},
        **kwargs,
    )


def test_verifying_waits_for_the_agent_to_see_the_module_gone_then_the_node_leaves() -> None:
    live = answered(verifying(), report=report(), finished_ago=2)
    assert step_verifying(rollout([live]), live).actions == [RequestReport("n1", live.attempt)]
    gone = answered(verifying(), report=report(state="NOT_LOADED"))
    patch = only_patch(step_verifying(rollout([gone]), gone).actions)
    assert patch.labels == {names.STATE_LABEL: None}
    assert patch.unschedulable is False
    assert patch.annotations[names.CORDONED_BY_GPUCTL] is None
    assert patch.annotations[names.STATE_VERSION] is None
    assert patch.event is not None
    assert patch.event.reason == "RolloutRemoved"
    late = answered(verifying(since=301), report=report())
    patch = only_patch(step_verifying(rollout([late]), late).actions)
    assert patch.phase_to is Phase.FAILED
    assert "module xe is LIVE, not unloaded" in str(patch.annotations[names.REASON])


def test_verifying_waits_for_kmms_ready_label_to_go() -> None:
    facts = answered(verifying(labels={KMM.ready: ""}), report=report(state="NOT_LOADED"))
    assert step_verifying(rollout([facts]), facts).actions == []


# -- a change of mind ---------------------------------------------------------------------


def test_a_node_unloading_that_is_wanted_again_goes_back_to_checking_at_the_target() -> None:
    facts = node(phase=Phase.LOADING, version=NONE, unschedulable=True)
    patch = patches(decide(rollout([facts])))["n1"]
    assert patch.phase_to is Phase.CHECKING
    assert patch.annotations[names.STATE_VERSION] == TARGET
    assert patch.unschedulable is None


def test_a_node_loading_that_is_no_longer_wanted_goes_back_to_checking_for_removal() -> None:
    facts = unwanted(phase=Phase.LOADING, version=TARGET, labels=loaded_labels(TARGET))
    patch = patches(decide(rollout([facts])))["n1"]
    assert patch.phase_to is Phase.CHECKING
    assert patch.annotations[names.STATE_VERSION] == NONE


# -- status -------------------------------------------------------------------------------


def test_the_status_of_a_removal_says_which_version_it_speaks_of() -> None:
    decision = decide(rollout([pending_removal("a"), pending_removal("b")], target=None))
    status = decision.status
    assert status is not None
    assert status["targetVersion"] == NONE
    assert status["state"] == "Progressing"
    assert status["message"].startswith("unloading the driver from 2 node(s)")
    assert (status["total"], status["updated"]) == (0, 0)


def test_a_rollout_is_complete_only_once_its_removals_are_done() -> None:
    nodes = [node("a", phase=Phase.DONE, labels=loaded_labels()), pending_removal("b")]
    status = decide(rollout(nodes)).status
    assert status is not None
    assert status["state"] == "Progressing"
    assert "unloading the driver from 1 node(s)" in status["message"]
    done = decide(rollout(nodes[:1])).status
    assert done is not None
    assert done["state"] == "Complete"
    assert done["message"] == f"all 1 nodes run {TARGET}"
