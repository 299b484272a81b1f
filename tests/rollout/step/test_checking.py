"""The Checking step (gpuctl/rollout/step/checking.py): a fresh agent report, the node's
pods and claims, then the write that cordons and records the node and takes it to Draining,
or Blocked naming why."""

from __future__ import annotations

import dataclasses
import json

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import RequestReport
from gpuctl.rollout.input.facts import INSPECT
from gpuctl.rollout.input.settings import Timeouts
from gpuctl.rollout.step.checking import step_checking
from tests.rollout.step.step_samples import POD, only_patch, settings
from tests.support.rollout_samples import (
    ACTIVE_VFS,
    HELD,
    KMM,
    OLD,
    OPEN_CLIENT,
    PF,
    answered,
    in_flight,
    loaded_labels,
    node,
    report,
    rollout,
)


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


def test_timeouts_come_from_settings() -> None:
    quick = settings(timeouts=Timeouts(check=5))
    facts = in_flight(node(phase=Phase.CHECKING, since=6), INSPECT)
    patch = only_patch(step_checking(rollout([facts], settings=quick), facts).actions)
    assert "within 5s" in str(patch.annotations[names.REASON])


# -- fresh truth --------------------------------------------------------------------------


def test_a_node_another_gpudriver_targets_is_not_loaded() -> None:
    facts = node(phase=Phase.CHECKING, labels={names.TARGET_LABEL: "other"})
    patch = only_patch(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON] == (
        f"node is targeted by GPUDriver other ({names.TARGET_LABEL}=other)"
    )
