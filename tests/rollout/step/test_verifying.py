"""The Verifying step (gpuctl/rollout/step/verifying.py): the agent confirms the module
asked for (by the user's backport tag or by srcversion), the recorded changes are restored,
then Done and uncordoned; a GPU in survivability mode fails the node."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode, RequestReport, SendRestore
from gpuctl.rollout.input.facts import RESTORE, NodeFacts, RestoreFacts
from gpuctl.rollout.input.records import encode_changes
from gpuctl.rollout.step.verifying import step_verifying
from tests.rollout.step.step_samples import IMAGE, only_patch, settings, verifying
from tests.support.rollout_samples import (
    KMM,
    MODULE_VERSION,
    PF,
    TARGET,
    answered,
    disabled_vfs,
    new_report,
    report,
    rollout,
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
