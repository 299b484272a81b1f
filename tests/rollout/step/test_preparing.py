"""The Preparing step (gpuctl/rollout/step/preparing.py): the agent prepares the node, or a
fresh report shows nothing holds it; then the KMM write, with the changes to restore and the
image, into Loading."""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import RequestReport, SendPrepare
from gpuctl.rollout.input.facts import INSPECT, PREPARE
from gpuctl.rollout.input.records import BoundFunction, encode_bound, encode_changes, encode_vfs
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.preparing import step_preparing
from tests.rollout.step.step_samples import IMAGE, POD, only_patch, settings
from tests.support.rollout_samples import (
    ACTIVE_VFS,
    HELD,
    KMM,
    OPEN_CLIENT,
    PF,
    TARGET,
    answered,
    disabled_vfs,
    in_flight,
    node,
    prepared,
    report,
    rollout,
    targeted,
)


def test_preparing_without_permission_to_change_uses_a_fresh_report() -> None:
    facts = node(phase=Phase.PREPARING, unschedulable=True)
    assert step_preparing(rollout([facts]), facts).actions == [RequestReport("n1", facts.attempt)]
    clean = answered(facts, report=report())
    patch = only_patch(step_preparing(rollout([clean]), clean).actions)
    assert patch.phase_to is Phase.LOADING
    assert patch.labels[KMM.version] == TARGET
    busy = answered(facts, report=report(blockers=[OPEN_CLIENT]))
    patch = only_patch(step_preparing(rollout([busy]), busy).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert KMM.version not in patch.labels


def test_preparing_sends_prepare_with_the_settings() -> None:
    facts = node(phase=Phase.PREPARING)
    allowed = rollout([facts], settings=settings(disable_idle_vfs=True))
    assert step_preparing(allowed, facts).actions == [
        SendPrepare("n1", facts.attempt, "xe", allow_unbind=False, allow_disable_vfs=True)
    ]
    with_compat = rollout(
        [facts], settings=settings(unbind_idle_devices=True), unloaded_with=["xe_compat"]
    )
    assert step_preparing(with_compat, facts).actions == [
        SendPrepare(
            "n1",
            facts.attempt,
            "xe",
            allow_unbind=True,
            allow_disable_vfs=False,
            unloaded_with=("xe_compat",),
        )
    ]


def test_preparing_from_a_report_a_holder_blocks_listed_or_not() -> None:
    facts = answered(
        node(phase=Phase.PREPARING, unschedulable=True),
        report=report(blockers=[HELD], holders=["xe_compat"]),
    )
    patch = only_patch(step_preparing(rollout([facts], unloaded_with=["xe_compat"]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert "KMM removes xe first" in str(patch.annotations[names.REASON])
    patch = only_patch(step_preparing(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == HELD.message


def test_preparing_ready_records_changes_and_labels_in_one_write() -> None:
    facts = answered(
        node(phase=Phase.PREPARING, annotations={names.VFS_BEFORE: encode_vfs({PF: 2})}),
        PREPARE,
        prepare=prepared(changes=[disabled_vfs(PF, 2)], after=report(vfs={PF: 0})),
    )
    patch = only_patch(
        step_preparing(rollout([facts], settings=settings(disable_idle_vfs=True)), facts).actions
    )
    assert patch.phase_to is Phase.LOADING
    assert patch.labels[KMM.version] == TARGET
    assert patch.annotations[names.PREPARE_CHANGES] == encode_changes([disabled_vfs(PF, 2)])


def test_preparing_a_restart_after_an_unrecorded_answer_reconstructs_the_changes() -> None:
    # The agent disabled the VFs, the coordinator died before writing its answer; asked
    # again, the agent changes nothing and says so.
    facts = answered(
        node(phase=Phase.PREPARING, annotations={names.VFS_BEFORE: encode_vfs({PF: 2})}),
        PREPARE,
        prepare=prepared(changes=[], after=report(vfs={PF: 0})),
    )
    patch = only_patch(
        step_preparing(rollout([facts], settings=settings(disable_idle_vfs=True)), facts).actions
    )
    assert patch.annotations[names.PREPARE_CHANGES] == encode_changes([disabled_vfs(PF, 2)])


def test_preparing_infers_no_change_a_preparation_was_not_allowed_to_make() -> None:
    # A rollback: the failed driver left the function unbound. Preparation may not unbind
    # (unbindIdleDevices is off), so nothing is recorded to restore: verification at the
    # rollback's version checks the function is bound again, without a RestoreRequest.
    bound = {names.BOUND_BEFORE: encode_bound([BoundFunction(PF, "xe")])}
    facts = answered(
        node(phase=Phase.PREPARING, annotations=bound),
        INSPECT,
        report=report(drivers={PF: ""}),
    )
    patch = only_patch(step_preparing(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.LOADING
    assert names.PREPARE_CHANGES not in patch.annotations
    allowed = settings(unbind_idle_devices=True)
    asked = answered(
        node(phase=Phase.PREPARING, annotations=bound),
        PREPARE,
        prepare=prepared(after=report(drivers={PF: ""})),
    )
    patch = only_patch(step_preparing(rollout([asked], settings=allowed), asked).actions)
    assert names.PREPARE_CHANGES in patch.annotations  # one it may have made: restored after


def test_preparing_not_ready_blocks_with_the_agents_reasons() -> None:
    facts = answered(
        node(
            phase=Phase.PREPARING,
            unschedulable=True,
            annotations={names.CORDONED_BY_GPUCTL: "true"},
        ),
        PREPARE,
        prepare=prepared(ready=False, blockers=[ACTIVE_VFS]),
    )
    patch = only_patch(
        step_preparing(rollout([facts], settings=settings(disable_idle_vfs=True)), facts).actions
    )
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == ACTIVE_VFS.message
    assert patch.unschedulable is False


def test_preparing_half_way_failure_fails_and_keeps_the_changes() -> None:
    facts = answered(
        node(phase=Phase.PREPARING),
        PREPARE,
        prepare=prepared(ready=False, changes=[disabled_vfs(PF, 2)], error="EIO on 0000:83:00.0"),
    )
    patch = only_patch(
        step_preparing(rollout([facts], settings=settings(disable_idle_vfs=True)), facts).actions
    )
    assert patch.phase_to is Phase.FAILED
    assert patch.annotations[names.PREPARE_CHANGES] == encode_changes([disabled_vfs(PF, 2)])
    assert patch.unschedulable is None


def test_preparing_no_answer_in_time_fails() -> None:
    facts = in_flight(node(phase=Phase.PREPARING, since=121), PREPARE)
    patch = only_patch(
        step_preparing(rollout([facts], settings=settings(disable_idle_vfs=True)), facts).actions
    )
    assert patch.phase_to is Phase.FAILED
    assert "PrepareRequest within 2m" in str(patch.annotations[names.REASON])


def test_preparing_new_gpu_pods_send_it_back_to_draining() -> None:
    facts = node(phase=Phase.PREPARING, pods=[POD])
    assert only_patch(step_preparing(rollout([facts]), facts).actions).phase_to is Phase.DRAINING


def test_preparing_a_malformed_record_fails_the_node_not_the_process() -> None:
    facts = answered(
        node(phase=Phase.PREPARING, annotations={names.VFS_BEFORE: "[oops"}), report=report()
    )
    patch = only_patch(step_preparing(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.FAILED
    assert "vfs-before" in str(patch.annotations[names.REASON])


def test_functions_unbound_by_an_unload_are_no_change_to_restore() -> None:
    """Taken back to Checking while KMM was between unload and load (a version changed
    mid-rollout), the fresh report shows xe not loaded and its function unbound: that is the
    unload's doing, not a preparation's, so nothing is recorded to restore — with or without
    the settings that let the agent change the node."""
    unloaded = report(state="NOT_LOADED", drivers={PF: ""})
    records = {names.BOUND_BEFORE: encode_bound([BoundFunction(PF, "xe")])}
    for allowed in (settings(), settings(unbind_idle_devices=True)):
        facts = answered(node(phase=Phase.PREPARING, annotations=records), report=unloaded)
        kind = PREPARE if allowed.prepare_changes_node else INSPECT
        if kind == PREPARE:
            facts = answered(
                node(phase=Phase.PREPARING, annotations=records),
                PREPARE,
                prepare=prepared(after=unloaded),
            )
        patch = only_patch(step_preparing(rollout([facts], settings=allowed), facts).actions)
        assert patch.phase_to is Phase.LOADING
        assert not patch.annotations.get(names.PREPARE_CHANGES)
    # Live and unbound where the agent may unbind: that was a preparation, to be restored.
    live_unbound = report(drivers={PF: ""})
    allowed = settings(unbind_idle_devices=True)
    facts = answered(
        node(phase=Phase.PREPARING, annotations=records),
        PREPARE,
        prepare=prepared(after=live_unbound),
    )
    patch = only_patch(step_preparing(rollout([facts], settings=allowed), facts).actions)
    assert PF in str(patch.annotations.get(names.PREPARE_CHANGES))


# -- fresh truth --------------------------------------------------------------------------


def test_the_load_write_is_decided_only_on_a_fresh_answer_of_this_step() -> None:
    allowed = settings(disable_idle_vfs=True)
    base = node(phase=Phase.PREPARING, unschedulable=True)
    stale = answered(base, PREPARE, prepare=prepared(after=report()), finished_ago=6)
    assert step_preparing(rollout([stale], settings=allowed), stale).actions == [
        SendPrepare("n1", stale.attempt, "xe", allow_unbind=False, allow_disable_vfs=True)
    ]
    fresh = answered(base, PREPARE, prepare=prepared(after=report()), finished_ago=1)
    patch = only_patch(step_preparing(rollout([fresh], settings=allowed), fresh).actions)
    assert patch.phase_to is Phase.LOADING
    assert patch.labels == {names.STATE_LABEL: "Loading", **targeted()}


# -- The image a node is loaded from (srcversion verification of config-only changes) ------


def test_the_kmm_write_records_the_image_and_checking_the_one_before() -> None:
    before = answered(
        dataclasses.replace(
            node(phase=Phase.CHECKING, annotations={names.DRIVER_IMAGE: IMAGE}),
            target_image=IMAGE,
        ),
        report=report(),
    )
    patch = only_patch(step_checking(rollout([before]), before).actions)
    assert patch.annotations[names.IMAGE_BEFORE] == IMAGE
    preparing = answered(
        dataclasses.replace(node(phase=Phase.PREPARING, unschedulable=True), target_image=IMAGE),
        report=report(),
    )
    patch = only_patch(step_preparing(rollout([preparing]), preparing).actions)
    assert patch.phase_to is Phase.LOADING
    assert patch.annotations[names.DRIVER_IMAGE] == IMAGE
