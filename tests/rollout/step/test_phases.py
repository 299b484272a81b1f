"""Each in-progress phase's step, from plain facts to the next write or request."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import (
    EvictPods,
    PatchNode,
    RequestReport,
    SendPrepare,
    SendRestore,
)
from gpuctl.rollout.input.facts import INSPECT, PREPARE, RESTORE, GpuPod, NodeFacts, RestoreFacts
from gpuctl.rollout.input.records import BoundFunction, encode_bound, encode_changes, encode_vfs
from gpuctl.rollout.input.settings import RolloutSettings, Timeouts
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.draining import step_draining
from gpuctl.rollout.step.loading import LOAD_WITHDRAWN, step_loading
from gpuctl.rollout.step.preparing import step_preparing
from gpuctl.rollout.step.verifying import step_verifying
from gpuctl.rollout.step.worker_hold import LOADING_CHECK_SECONDS
from tests.support.rollout_samples import (
    ACTIVE_VFS,
    HELD,
    KMM,
    MODULE_VERSION,
    OLD,
    OPEN_CLIENT,
    PF,
    TARGET,
    answered,
    disabled_vfs,
    in_flight,
    loaded_labels,
    new_report,
    node,
    prepared,
    report,
    rollout,
    targeted,
)

POD = GpuPod("ml", "trainer-0")
VF = "0000:03:00.1"


def only_patch(actions: Sequence[object]) -> PatchNode:
    assert len(actions) == 1, actions
    patch = actions[0]
    assert isinstance(patch, PatchNode)
    return patch


def settings(**kwargs: Any) -> RolloutSettings:
    return dataclasses.replace(RolloutSettings(hold_after_first_node=False), **kwargs)


# -- Checking -----------------------------------------------------------------------------


def test_checking_asks_for_a_fresh_report_and_waits_for_it() -> None:
    facts = node(phase=Phase.CHECKING)
    step = step_checking(rollout([facts]), facts)
    assert step.actions == [RequestReport("n1", facts.attempt)]
    waiting = in_flight(facts)
    assert step_checking(rollout([waiting]), waiting).actions == []


def test_checking_never_proceeds_on_an_answer_of_an_earlier_step() -> None:
    earlier = answered(node(phase=Phase.CHECKING, since=500), report=report())
    now = dataclasses.replace(
        earlier, annotations={**earlier.annotations, names.SINCE: "2026-11-29T11:59:58Z"}
    )
    step = step_checking(rollout([now]), now)
    assert step.actions == [RequestReport("n1", now.attempt)]


def test_checking_without_a_report_in_time_blocks_with_the_reason() -> None:
    facts = answered(node(phase=Phase.CHECKING, since=61), error="agent not connected")
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert "no fresh agent report within 60s: agent not connected" in str(
        patch.annotations[names.REASON]
    )


def test_checking_a_failed_request_is_retried_after_a_pause() -> None:
    facts = answered(node(phase=Phase.CHECKING, since=10), error="timeout", finished_ago=0.2)
    assert step_checking(rollout([facts]), facts).actions == []
    later = answered(node(phase=Phase.CHECKING, since=10), error="timeout", finished_ago=1.5)
    assert step_checking(rollout([later]), later).actions == [RequestReport("n1", later.attempt)]


def test_checking_a_reload_waits_for_kmm_to_find_its_image_then_blocks_naming_it() -> None:
    # KMM has OLD loaded; its ModuleImagesConfig says nothing yet of the new image.
    waiting = node(phase=Phase.CHECKING, since=10, labels=loaded_labels(OLD), image_state="")
    waiting = dataclasses.replace(waiting, target_image="r.example/xe:new")
    step = step_checking(rollout([waiting]), waiting)
    assert step.actions == []  # nothing asked, nothing written: KMM may still be pulling
    late = node(phase=Phase.CHECKING, since=61, labels=loaded_labels(OLD), image_state="")
    late = dataclasses.replace(late, target_image="r.example/xe:new")
    patch = only_patch(step_checking(rollout([late]), late).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON_KIND] == "image-not-ready"
    reason = str(patch.annotations[names.REASON])
    assert "KMM has not found image r.example/xe:new for the node's kernel" in reason
    assert f"the reload would unload {OLD}" in reason
    assert KMM.version not in patch.labels  # the version label is not flipped


def test_checking_a_reload_blocked_on_an_unread_images_record_says_it_was_not_read() -> None:
    # The coordinator could not read KMM's ModuleImagesConfig: that is not "KMM found none".
    late = node(phase=Phase.CHECKING, since=61, labels=loaded_labels(OLD), image_state="")
    late = dataclasses.replace(late, target_image="r.example/xe:new")
    unread = dataclasses.replace(rollout([late]), images_unknown="not listed yet")
    patch = only_patch(step_checking(unread, late).actions)
    reason = str(patch.annotations[names.REASON])
    assert "whether KMM has found image r.example/xe:new for the node's kernel is unknown" in reason
    assert "its ModuleImagesConfig could not be read: not listed yet" in reason, reason
    assert "KMM has not found" not in reason
    assert KMM.version not in patch.labels  # held, as for an image not found


def test_checking_needs_no_image_answer_for_a_first_load_nor_once_kmm_found_it() -> None:
    first = node(phase=Phase.CHECKING, image_state="")
    assert step_checking(rollout([first]), first).actions == [RequestReport("n1", first.attempt)]
    found = node(phase=Phase.CHECKING, labels=loaded_labels(OLD), image_state="Exists")
    assert step_checking(rollout([found]), found).actions == [RequestReport("n1", found.attempt)]


def test_checking_a_notready_node_is_blocked() -> None:
    facts = node(phase=Phase.CHECKING, ready=False)
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == "node is NotReady"


def test_checking_an_open_render_fd_blocks_before_any_cordon() -> None:
    facts = answered(node(phase=Phase.CHECKING), report=report(blockers=[OPEN_CLIENT]))
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert "pid 4242 (ollama)" in str(patch.annotations[names.REASON])
    assert patch.unschedulable is None
    assert rollout([facts]).kmm.version not in patch.labels


def test_checking_gpu_pods_are_drained_first_even_with_blockers() -> None:
    facts = answered(node(phase=Phase.CHECKING, pods=[POD]), report=report(blockers=[OPEN_CLIENT]))
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.DRAINING
    assert "ml/trainer-0" in str(patch.annotations[names.REASON])


def test_checking_idle_vfs_go_on_when_preparation_may_disable_them() -> None:
    facts = answered(node(phase=Phase.CHECKING), report=report(blockers=[ACTIVE_VFS]))
    allowed = rollout([facts], settings=settings(disable_idle_vfs=True))
    assert only_patch(step_checking(allowed, facts).actions).phase_to is Phase.DRAINING
    assert only_patch(step_checking(rollout([facts]), facts).actions).phase_to is Phase.BLOCKED
    for vf_driver in ("vfio-pci", "i915"):  # handed to a VM, or bound to another driver
        busy = answered(
            node(phase=Phase.CHECKING), report=report(blockers=[ACTIVE_VFS], vf_driver=vf_driver)
        )
        patch = only_patch(step_checking(allowed, busy).actions)
        assert patch.phase_to is Phase.BLOCKED
        assert patch.annotations[names.REASON] == ACTIVE_VFS.message


def test_checking_a_holder_module_blocks_even_when_modules_loading_order_lists_it() -> None:
    held = answered(
        node(phase=Phase.CHECKING), report=report(blockers=[HELD], holders=["xe_compat"])
    )
    patch = only_patch(step_checking(rollout([held]), held).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == HELD.message
    # KMM removes xe first and xe_compat after it: `modprobe -r xe` would fail (EBUSY).
    with_compat = rollout([held], unloaded_with=["xe_compat"])
    patch = only_patch(step_checking(with_compat, held).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.unschedulable is None
    assert patch.annotations[names.REASON] == (
        "xe is held by xe_compat: KMM removes xe first and modulesLoadingOrder's xe_compat "
        "only after it, so `modprobe -r xe` fails (EBUSY); unload it first, or fix the order"
    )


def test_checking_to_draining_cordons_and_records_the_node_once() -> None:
    before = report(drivers={PF: "xe", "0000:04:00.0": "snd_hda_intel"}, vfs={PF: 2})
    facts = answered(node(phase=Phase.CHECKING), report=before)
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.DRAINING
    assert patch.unschedulable is True
    assert patch.annotations[names.CORDONED_BY_GPUCTL] == "true"
    assert json.loads(str(patch.annotations[names.BOUND_BEFORE])) == [
        {"pciAddress": PF, "driver": "xe"}
    ]
    assert json.loads(str(patch.annotations[names.VFS_BEFORE])) == {PF: 2}
    assert patch.annotations[names.SRCVERSION_BEFORE] == "OLDSRC"
    assert patch.labels == {names.STATE_LABEL: "Draining"}
    # A retried node keeps what it recorded the first time.
    kept = answered(
        node(
            phase=Phase.CHECKING,
            annotations={
                names.BOUND_BEFORE: "[]",
                names.VFS_BEFORE: "{}",
                names.SRCVERSION_BEFORE: "X",
            },
        ),
        report=before,
    )
    patch = only_patch(step_checking(rollout([kept]), kept).actions)
    assert not {names.BOUND_BEFORE, names.VFS_BEFORE, names.SRCVERSION_BEFORE} & set(
        patch.annotations
    )


def test_checking_an_admin_cordon_is_remembered_as_not_ours() -> None:
    facts = answered(node(phase=Phase.CHECKING, unschedulable=True), report=report())
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.annotations[names.CORDONED_BY_GPUCTL] == "false"
    assert patch.unschedulable is None


def test_checking_without_cordon_setting_leaves_the_node_schedulable() -> None:
    facts = answered(node(phase=Phase.CHECKING), report=report())
    patch = only_patch(
        step_checking(rollout([facts], settings=settings(cordon=False)), facts).actions
    )
    assert patch.unschedulable is None
    assert names.CORDONED_BY_GPUCTL not in patch.annotations


def test_checking_waits_for_the_pod_list() -> None:
    facts = answered(node(phase=Phase.CHECKING, pods=None), report=report())
    assert step_checking(rollout([facts]), facts).actions == []


# -- Draining -----------------------------------------------------------------------------


def test_draining_waits_for_pods_then_prepares() -> None:
    busy = node(
        phase=Phase.DRAINING,
        pods=[POD],
        unschedulable=True,
        annotations={names.CORDONED_BY_GPUCTL: "true"},
    )
    assert step_draining(rollout([busy]), busy).actions == []
    idle = node(phase=Phase.DRAINING, unschedulable=True)
    assert only_patch(step_draining(rollout([idle]), idle).actions).phase_to is Phase.PREPARING


def test_draining_evicts_when_allowed() -> None:
    busy = node(phase=Phase.DRAINING, pods=[POD], unschedulable=True)
    step = step_draining(rollout([busy], settings=settings(evict_gpu_pods=True)), busy)
    assert step.actions == [EvictPods("n1", (POD,))]
    assert step.wake_in is not None
    assert step.wake_in <= 2


def test_draining_timeout_blocks_naming_pods_and_claims_and_releases_our_cordon() -> None:
    busy = node(
        phase=Phase.DRAINING,
        since=601,
        pods=[POD],
        claims=["ml/claim-a"],
        unschedulable=True,
        annotations={names.CORDONED_BY_GPUCTL: "true", names.BOUND_BEFORE: "[]"},
    )
    patch = only_patch(step_draining(rollout([busy]), busy).actions)
    assert patch.phase_to is Phase.BLOCKED
    reason = str(patch.annotations[names.REASON])
    assert "ml/trainer-0" in reason
    assert "ml/claim-a" in reason
    assert "evictGPUPods is off" in reason
    assert patch.unschedulable is False
    assert patch.annotations[names.CORDONED_BY_GPUCTL] is None
    assert patch.annotations[names.BOUND_BEFORE] is None


def test_draining_an_admin_cordon_is_never_lifted() -> None:
    busy = node(
        phase=Phase.DRAINING,
        since=601,
        pods=[POD],
        unschedulable=True,
        annotations={names.CORDONED_BY_GPUCTL: "false"},
    )
    patch = only_patch(step_draining(rollout([busy]), busy).actions)
    assert patch.unschedulable is None


def test_draining_restores_a_lost_cordon() -> None:
    facts = node(phase=Phase.DRAINING, annotations={names.CORDONED_BY_GPUCTL: "true"})
    patch = only_patch(step_draining(rollout([facts]), facts).actions)
    assert patch.unschedulable is True
    assert patch.phase_to is None


# -- Preparing ----------------------------------------------------------------------------


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


# -- Loading ------------------------------------------------------------------------------


def test_loading_waits_for_kmm_then_verifies() -> None:
    waiting = node(phase=Phase.LOADING, labels=targeted())
    step = step_loading(rollout([waiting]), waiting)
    # Until KMM acts, the agent is asked again: something may open the devices meanwhile.
    assert step.actions == [RequestReport(waiting.name, waiting.attempt)]
    assert step.wake_in == LOADING_CHECK_SECONDS
    loaded = node(phase=Phase.LOADING, labels=loaded_labels())
    assert only_patch(step_loading(rollout([loaded]), loaded).actions).phase_to is Phase.VERIFYING


def test_a_removed_target_or_version_label_in_loading_is_written_again_only_after_checks() -> None:
    for labels in ({}, {KMM.version: TARGET}, {names.TARGET_LABEL: "gpu"}):
        facts = node(phase=Phase.LOADING, labels=labels)
        patch = only_patch(step_loading(rollout([facts]), facts).actions)
        assert patch.phase_to is Phase.CHECKING
        assert names.TARGET_LABEL not in patch.labels
        assert KMM.version not in patch.labels
        assert "checked again first" in str(patch.annotations[names.REASON])


def test_loading_timeout_fails_and_takes_back_a_load_that_left_nothing_loaded() -> None:
    facts = node(phase=Phase.LOADING, since=601, labels=targeted())
    patch = only_patch(step_loading(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.FAILED
    assert patch.annotations[names.REASON] == (
        f"KMM did not load {TARGET} within 10m; {LOAD_WITHDRAWN}"
    )
    # KMM's loader is left no standing order: the Module no longer selects the node.
    assert patch.labels[names.TARGET_LABEL] is None
    assert patch.labels[KMM.version] is None


def test_loading_timeout_keeps_the_write_where_kmm_reports_something_loaded() -> None:
    # KMM's ready label (at another version): taking the write back would be an unload.
    labels = {**targeted(), KMM.ready: "", KMM.version_ready: OLD}
    facts = node(phase=Phase.LOADING, since=601, labels=labels)
    patch = only_patch(step_loading(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.FAILED
    assert patch.annotations[names.REASON] == f"KMM did not load {TARGET} within 10m"
    assert names.TARGET_LABEL not in patch.labels
    assert KMM.version not in patch.labels


def test_loading_timeout_names_what_kmm_did() -> None:
    doing = "KMM's load Pod gpuctl-system/kmm-worker-n1-gpu-gpu: container worker CrashLoopBackOff"
    facts = dataclasses.replace(
        node(phase=Phase.LOADING, since=601, labels=targeted()), kmm_activity=doing
    )
    patch = only_patch(step_loading(rollout([facts]), facts).actions)
    assert patch.annotations[names.REASON] == (
        f"KMM did not load {TARGET} within 10m: {doing}; {LOAD_WITHDRAWN}"
    )


# -- Verifying ----------------------------------------------------------------------------

RECORDED = {
    names.BOUND_BEFORE: encode_bound([BoundFunction(PF, "xe")]),
    names.VFS_BEFORE: encode_vfs({PF: 2}),
    names.SRCVERSION_BEFORE: "OLDSRC",
    names.CORDONED_BY_GPUCTL: "true",
}


def verifying(*, since: float = 5, annotations: dict[str, str] | None = None) -> NodeFacts:
    return node(
        phase=Phase.VERIFYING,
        since=since,
        labels=loaded_labels(),
        unschedulable=True,
        annotations={**RECORDED, **(annotations or {})},
    )


def test_verifying_done_uncordons_and_clears_the_records() -> None:
    facts = answered(verifying(), report=new_report(vfs={PF: 2}))
    patch = only_patch(step_verifying(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.DONE
    assert patch.unschedulable is False
    for key in (*names.PASS_DETAIL, names.CORDONED_BY_GPUCTL):
        assert patch.annotations[key] is None


def test_verifying_old_module_is_polled_then_failed() -> None:
    facts = answered(verifying(), report=report(vfs={PF: 2}), finished_ago=2)
    assert step_verifying(rollout([facts]), facts).actions == [RequestReport("n1", facts.attempt)]
    late = answered(verifying(since=301), report=report(vfs={PF: 2}))
    patch = only_patch(step_verifying(rollout([late]), late).actions)
    assert patch.phase_to is Phase.FAILED
    assert "backport tag xeb_v6" in str(patch.annotations[names.REASON])


def test_verifying_by_srcversion() -> None:
    by_src = rollout([], settings=settings(verify_by="srcversion"))
    same = answered(verifying(since=301), report=new_report(srcversion="OLDSRC", vfs={PF: 2}))
    patch = only_patch(step_verifying(dataclasses.replace(by_src, nodes=[same]), same).actions)
    assert "srcversion is still OLDSRC" in str(patch.annotations[names.REASON])
    changed = answered(verifying(), report=report(srcversion="NEWSRC", vfs={PF: 2}))
    patch = only_patch(
        step_verifying(dataclasses.replace(by_src, nodes=[changed]), changed).actions
    )
    assert patch.phase_to is Phase.DONE


def test_verifying_restores_recorded_changes_before_done() -> None:
    changes = encode_changes([disabled_vfs(PF, 2)])
    facts = answered(
        verifying(annotations={names.PREPARE_CHANGES: changes}),
        report=new_report(vfs={PF: 0}),
        finished_ago=0.5,
    )
    assert step_verifying(rollout([facts]), facts).actions == [
        SendRestore("n1", facts.attempt, changes)
    ]
    restored = answered(
        facts, RESTORE, restore=RestoreFacts((), new_report(vfs={PF: 2})), finished_ago=0
    )
    assert only_patch(step_verifying(rollout([restored]), restored).actions).phase_to is Phase.DONE
    broken = answered(facts, RESTORE, restore=RestoreFacts(("sriov_numvfs: EBUSY",), None))
    patch = only_patch(step_verifying(rollout([broken]), broken).actions)
    assert patch.phase_to is Phase.FAILED
    assert "EBUSY" in str(patch.annotations[names.REASON])


def in_survivability(facts_report: Any, mode: int) -> Any:
    """The report with its PF in xe's survivability mode (`mode`)."""
    device = facts_report.report.devices.add(pci_address=PF, driver="xe")
    device.survivability.mode = mode
    return facts_report


def test_verifying_a_gpu_in_survivability_mode_fails_at_once_though_it_is_bound() -> None:
    healthy = in_survivability(new_report(vfs={PF: 2}), report_pb.Survivability.NONE)
    facts = answered(verifying(), report=healthy)
    assert only_patch(step_verifying(rollout([facts]), facts).actions).phase_to is Phase.DONE
    sick = in_survivability(new_report(vfs={PF: 2}), report_pb.Survivability.BOOT)
    facts = answered(verifying(since=1), report=sick)
    patch = only_patch(step_verifying(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.FAILED
    assert str(patch.annotations[names.REASON]).startswith(
        f"in survivability mode: {PF} (Boot): xe found the GPU's firmware failed"
    )
    # While the old module is still loaded, it is not the new driver's failure: wait for it.
    old = in_survivability(report(vfs={PF: 2}), report_pb.Survivability.RUNTIME)
    facts = answered(verifying(), report=old, finished_ago=2)
    assert step_verifying(rollout([facts]), facts).actions == [RequestReport("n1", facts.attempt)]


def test_verifying_missing_functions_are_named() -> None:
    facts = answered(verifying(since=301), report=new_report(drivers={PF: ""}, vfs={PF: 2}))
    patch = only_patch(step_verifying(rollout([facts]), facts).actions)
    assert f"{PF} not bound to xe (unbound)" in str(patch.annotations[names.REASON])


def test_verifying_keeps_an_admin_cordon() -> None:
    facts = answered(
        verifying(annotations={names.CORDONED_BY_GPUCTL: "false"}),
        report=new_report(vfs={PF: 2}),
    )
    patch = only_patch(step_verifying(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.DONE
    assert patch.unschedulable is None
    assert patch.annotations[names.CORDONED_BY_GPUCTL] is None  # the record goes, the cordon stays


def test_verifying_a_node_that_lost_kmms_labels_waits() -> None:
    facts = answered(verifying(), report=new_report(vfs={PF: 2}))
    labels = {k: v for k, v in facts.labels.items() if k != KMM.ready}
    facts = dataclasses.replace(facts, labels=labels)
    assert step_verifying(rollout([facts]), facts).actions == []


def test_timeouts_come_from_settings() -> None:
    quick = settings(timeouts=Timeouts(check=5))
    facts = in_flight(node(phase=Phase.CHECKING, since=6), INSPECT)
    patch = only_patch(step_checking(rollout([facts], settings=quick), facts).actions)
    assert "within 5s" in str(patch.annotations[names.REASON])


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


def test_unknown_claims_block_checking_and_draining() -> None:
    why = "listing or watching resourceclaims failed: 503"
    checking = node(phase=Phase.CHECKING, claims_unknown=why)
    patch = only_patch(step_checking(rollout([checking]), checking).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == (
        f"cannot tell whether GPU ResourceClaims are allocated on the node: {why}"
    )
    draining = node(
        phase=Phase.DRAINING,
        unschedulable=True,
        claims_unknown=why,
        annotations={names.CORDONED_BY_GPUCTL: "true"},
        labels=loaded_labels(OLD),
    )
    patch = only_patch(step_draining(rollout([draining]), draining).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.unschedulable is False  # nothing was written: released


def test_a_node_another_gpudriver_targets_is_not_loaded() -> None:
    facts = node(phase=Phase.CHECKING, labels={names.TARGET_LABEL: "other"})
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == (
        f"node is targeted by GPUDriver other ({names.TARGET_LABEL}=other)"
    )


def test_blocked_keeps_the_cordon_while_kmm_acts_on_an_earlier_write() -> None:
    # Loading at OLD, then the target changed: KMM is unloading OLD's module (its ready
    # label gone, still targeted). A pod that shows up now must not be let back.
    mid = node(
        phase=Phase.DRAINING,
        since=601,
        pods=[POD],
        unschedulable=True,
        labels=targeted(OLD),
        annotations={names.CORDONED_BY_GPUCTL: "true", names.BOUND_BEFORE: "[]"},
    )
    patch = only_patch(step_draining(rollout([mid]), mid).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.unschedulable is None
    assert names.CORDONED_BY_GPUCTL not in patch.annotations


# -- verification against the user's version ---------------------------------------------


def test_the_backport_tag_is_compared_with_the_users_version_not_the_kmm_version() -> None:
    facts = answered(verifying(), report=new_report(vfs={PF: 2}))
    assert TARGET != MODULE_VERSION
    assert only_patch(step_verifying(rollout([facts]), facts).actions).phase_to is Phase.DONE


def test_without_a_users_version_a_live_module_with_a_new_srcversion_passes() -> None:
    def step(facts: NodeFacts) -> PatchNode:
        return only_patch(step_verifying(rollout([facts], module_version=""), facts).actions)

    changed = answered(verifying(), report=report(tag="", srcversion="NEWSRC", vfs={PF: 2}))
    patch = step(changed)
    assert patch.phase_to is Phase.DONE
    assert "srcversion NEWSRC" in str(patch.annotations[names.REASON])
    same = answered(verifying(since=301), report=report(tag="", vfs={PF: 2}))
    patch = step(same)
    assert patch.phase_to is Phase.FAILED
    assert "srcversion is still OLDSRC" in str(patch.annotations[names.REASON])
    # Nothing recorded before (the module was not live): live is enough.
    fresh = answered(
        verifying(annotations={names.SRCVERSION_BEFORE: ""}), report=report(tag="", vfs={PF: 2})
    )
    assert step(fresh).phase_to is Phase.DONE


# -- The image a node is loaded from (srcversion verification of config-only changes) ------

IMAGE = "registry.example.com/xe:1"


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


def test_by_srcversion_the_same_image_reloaded_passes_with_its_srcversion() -> None:
    by_src = rollout([], settings=settings(verify_by="srcversion"))
    same_image = {names.IMAGE_BEFORE: IMAGE, names.DRIVER_IMAGE: IMAGE}
    reloaded = answered(
        verifying(annotations=same_image), report=new_report(srcversion="OLDSRC", vfs={PF: 2})
    )
    patch = only_patch(
        step_verifying(dataclasses.replace(by_src, nodes=[reloaded]), reloaded).actions
    )
    assert patch.phase_to is Phase.DONE
    other_image = {names.IMAGE_BEFORE: IMAGE, names.DRIVER_IMAGE: "registry.example.com/xe:2"}
    stale = answered(
        verifying(since=301, annotations=other_image),
        report=new_report(srcversion="OLDSRC", vfs={PF: 2}),
    )
    patch = only_patch(step_verifying(dataclasses.replace(by_src, nodes=[stale]), stale).actions)
    assert "srcversion is still OLDSRC" in str(patch.annotations[names.REASON])


# -- timeouts count only what this coordinator watched ------------------------------------


def test_a_step_timeout_counts_no_more_than_the_coordinator_watched() -> None:
    """A control-plane outage, a failover or a clock running ahead makes a step look long
    (its `since` is some leader's wall clock); the timeout waits until this coordinator has
    itself watched for the whole timeout (found by the chaos run: nodes Failed "KMM did not
    load within 20s" across a kube-apiserver restart)."""
    loading = node(phase=Phase.LOADING, since=601, labels=targeted())
    just_back = dataclasses.replace(rollout([loading]), observed_for=5.0)
    step = step_loading(just_back, loading)
    assert not [a for a in step.actions if isinstance(a, PatchNode)]  # not failed yet
    watched_long_enough = dataclasses.replace(rollout([loading]), observed_for=601.0)
    patch = only_patch(step_loading(watched_long_enough, loading).actions)
    assert patch.phase_to is Phase.FAILED

    checking = answered(node(phase=Phase.CHECKING, since=61), error="agent not connected")
    step = step_checking(dataclasses.replace(rollout([checking]), observed_for=3.0), checking)
    assert not [a for a in step.actions if getattr(a, "phase_to", None) is Phase.BLOCKED]

    late = answered(verifying(since=301), report=report(vfs={PF: 2}))
    step = step_verifying(dataclasses.replace(rollout([late]), observed_for=1.0), late)
    assert not [a for a in step.actions if getattr(a, "phase_to", None) is Phase.FAILED]
