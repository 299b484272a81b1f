"""Revisions and rollback in the pure decision: status.revisions recorded pass by pass, a node
whose load or verification failed rolling the GPUDriver back (onNodeFailure: Rollback), and
the rollback's gate (only its nodes move, then Paused until resumed)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gpuctl.common import names
from gpuctl.common.merge_patch import apply_merge_patch
from gpuctl.common.names import Phase
from gpuctl.gpudriver import revisions as rev
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.report.history import recorded
from tests.support.rollout_samples import (
    OLD,
    OLD_MODULE_VERSION,
    TARGET,
    loaded_labels,
    node,
    rollout,
    targeted,
)

OLD_KM = {
    "version": OLD_MODULE_VERSION,
    "kernelMappings": [{"regexp": ".", "containerImage": "r/xe:1"}],
}
NEW_KM = {"version": "v7", "kernelMappings": [{"regexp": ".", "containerImage": "r/xe:2"}]}
HISTORY = [
    {"revision": 1, "version": OLD, "kernelModule": OLD_KM, "nodes": 3},
    {"revision": 2, "version": TARGET, "kernelModule": NEW_KM, "nodes": 0},
]
ROLLBACK = RolloutSettings(hold_after_first_node=False, on_node_failure="Rollback")


def at(version: str, phase: Phase = Phase.DONE, name: str = "a", **kw: Any) -> Any:
    return node(name, phase=phase, version=version, labels=loaded_labels(version), **kw)


# -- the history --------------------------------------------------------------------------


def record(history: list[dict[str, Any]], version: str, **kw: Any) -> list[dict[str, Any]]:
    values: dict[str, Any] = {
        "kernel_module": NEW_KM,
        "updated": 0,
        "complete": False,
        "started": "2026-11-29T11:00:00Z",
        "now": "2026-11-29T12:00:00Z",
    }
    values.update(kw)
    return recorded(history, version=version, **values)


def test_a_new_target_is_the_next_revision_with_its_kernel_module_images_and_digest() -> None:
    history = record([], "v7-0a1b2c3d")
    assert history == [
        {
            "revision": 1,
            "version": "v7-0a1b2c3d",
            "configDigest": "0a1b2c3d",
            "images": ["r/xe:2"],
            "kernelModule": NEW_KM,
            "rolledOutAt": "2026-11-29T11:00:00Z",
            "nodes": 0,
        }
    ]
    later = record(history, "v7-0a1b2c3d", updated=2, complete=True)
    assert (later[0]["nodes"], later[0]["completedAt"]) == (2, "2026-11-29T12:00:00Z")
    # A node fewer later (one moved on) does not lower the count of nodes that ran it.
    assert record(later, "v7-0a1b2c3d", updated=1)[0]["nodes"] == 2


def test_a_version_rolled_out_again_moves_to_a_new_number_keeping_its_kernel_module() -> None:
    history = record(record([], OLD, kernel_module=OLD_KM), TARGET)
    back = record(history, OLD, kernel_module=NEW_KM, started="2026-11-29T12:30:00Z")
    assert [(e["revision"], e["version"]) for e in back] == [(2, TARGET), (3, OLD)]
    assert back[-1]["kernelModule"] == OLD_KM
    assert back[-1]["rolledOutAt"] == "2026-11-29T12:30:00Z"
    assert "completedAt" not in back[-1]


def test_a_new_target_counts_the_nodes_still_done_at_the_revision_it_replaces() -> None:
    # The status written while OLD was the target saw one node Done; all three finished
    # before the target changed, and nothing moved yet when the new one is recorded.
    history = record([], OLD, kernel_module=OLD_KM, updated=1)
    after = record(history, TARGET, done_at={OLD: 3})
    assert [(e["version"], e["nodes"]) for e in after] == [(OLD, 3), (TARGET, 0)]
    # A count lower than recorded (a node moved on already) does not lower it.
    assert record(record(history, OLD, updated=3), TARGET, done_at={OLD: 2})[0]["nodes"] == 3


def test_the_history_keeps_the_newest_revisions_only() -> None:
    history: list[dict[str, Any]] = []
    for n in range(rev.MAX_REVISIONS + 3):
        history = record(history, f"v{n}-0000000{n % 10}")
    assert len(history) == rev.MAX_REVISIONS
    assert history[0]["revision"] == 4
    assert history[-1]["revision"] == rev.MAX_REVISIONS + 3


def test_decide_records_the_target_and_writes_the_history_only_when_it_changes() -> None:
    first = decide(rollout([at(TARGET)], kernel_module=NEW_KM))
    assert first.revisions is not None
    [entry] = first.revisions
    assert (entry["revision"], entry["version"], entry["nodes"]) == (1, TARGET, 1)
    assert entry["completedAt"] == "2026-11-29T12:00:00Z"
    again = decide(rollout([at(TARGET)], kernel_module=NEW_KM, revisions=first.revisions))
    assert again.revisions is None


def test_decide_at_a_new_target_counts_the_nodes_left_done_at_the_previous_revision() -> None:
    behind = [{"revision": 1, "version": OLD, "kernelModule": OLD_KM, "nodes": 2}]
    nodes = [at(OLD, name=name) for name in ("a", "b", "c")]
    decision = decide(rollout(nodes, kernel_module=NEW_KM, revisions=behind))
    assert decision.revisions is not None
    assert [(e["version"], e["nodes"]) for e in decision.revisions] == [(OLD, 3), (TARGET, 0)]


# -- rollback on a node failure -----------------------------------------------------------


def failed_after_load(name: str = "a") -> Any:
    return node(
        name,
        phase=Phase.FAILED,
        version=TARGET,
        labels=targeted(TARGET),
        reason="verification failed: 0000:03:00.0 is not bound to xe",
    )


def test_a_node_failed_after_its_kmm_write_rolls_back_to_the_previous_revision() -> None:
    nodes = [failed_after_load("a"), at(OLD, name="b")]
    decision = decide(rollout(nodes, settings=ROLLBACK, revisions=HISTORY))
    assert decision.rollback is not None
    assert decision.rollback.revision["revision"] == 1
    assert decision.rollback.revision["kernelModule"] == OLD_KM
    note = json.loads(decision.rollback.note)
    assert note == {
        "from": TARGET,
        "to": OLD,
        "revision": 1,
        "nodes": ["a"],
        "reason": "a: verification failed: 0000:03:00.0 is not bound to xe",
    }
    assert decision.rollback.event.kind == "Warning"
    assert "rolling back to revision 1" in decision.rollback.event.message


def test_no_rollback_with_pause_before_the_kmm_write_without_history_or_after_a_rollback() -> None:
    failed = [failed_after_load("a")]
    assert decide(rollout(failed, revisions=HISTORY)).rollback is None  # Pause, the default
    prepared = node("a", phase=Phase.FAILED, version=TARGET, reason="preparation timed out")
    assert decide(rollout([prepared], settings=ROLLBACK, revisions=HISTORY)).rollback is None
    only_this = HISTORY[1:]
    decision = decide(rollout(failed, settings=ROLLBACK, revisions=only_this))
    assert decision.rollback is None
    assert decision.status is not None
    assert decision.status["state"] == "Failed"
    # The target is a rollback's own result: it never rolls back again (to the bad one).
    record_ = {"from": OLD, "to": TARGET, "revision": 1, "nodes": ["a"], "reason": "x"}
    assert (
        decide(rollout(failed, settings=ROLLBACK, revisions=HISTORY, rollback=record_)).rollback
        is None
    )


# -- the rollback's gate ------------------------------------------------------------------

RECORD = {"from": TARGET, "to": OLD, "revision": 1, "nodes": ["a"], "reason": "a: bad"}


def back_at_old(nodes: list[Any], **kw: Any) -> Any:
    settings = dataclasses.replace(ROLLBACK, hold_after_first_node=True)
    return decide(
        rollout(nodes, settings=settings, target=OLD, revisions=HISTORY, rollback=RECORD, **kw)
    )


def test_while_rolling_back_only_the_failed_node_starts_even_past_the_hold() -> None:
    pending_a = node("a", phase=Phase.PENDING, version=OLD, labels=targeted(TARGET))
    pending_c = node("c", phase=Phase.PENDING, version=OLD, labels=loaded_labels(TARGET))
    decision = back_at_old([pending_a, at(OLD, name="b"), pending_c])
    starts = [a.node for a in decision.actions if getattr(a, "phase_to", None) is Phase.CHECKING]
    assert starts == ["a"]
    assert decision.status is not None
    assert decision.status["state"] == "Progressing"
    assert "taking a back through the same checks" in decision.status["message"]
    assert decision.rollback is None


def test_once_its_nodes_are_back_the_rollout_is_paused_until_resumed_for_that_version() -> None:
    nodes = [at(OLD, name="a"), at(OLD, name="b")]
    decision = back_at_old(nodes)
    assert decision.status is not None
    assert decision.status["state"] == "Paused"
    assert decision.status["message"].startswith(f"paused: rolled back from {TARGET}")
    assert "a: bad" in decision.status["message"]
    [event] = decision.events
    assert event.reason == "RolloutPaused"
    resumed = back_at_old(nodes, resumed=OLD)
    assert resumed.status is not None
    assert resumed.status["state"] == "Complete"


def test_restore_patch_puts_the_recorded_kernel_module_back_exactly() -> None:
    current = {**NEW_KM, "parameters": ["enable_psmi=1"]}
    driver = {
        "metadata": {"name": "gpu", "resourceVersion": "42"},
        "spec": {"kernelModule": current},
    }
    patch = rev.restore_patch(driver, HISTORY[0], {names.ROLLBACK: "x"})
    assert patch["metadata"] == {"resourceVersion": "42", "annotations": {names.ROLLBACK: "x"}}
    merged = apply_merge_patch(current, patch["spec"]["kernelModule"])
    assert merged == OLD_KM


# -- a rollback left to Git (a GitOps tool applies the spec) ----------------------------

IN_GIT = {**RECORD, "gitops": "Argo CD (field manager argocd-controller)"}


def test_a_rollback_left_to_git_pauses_at_the_target_and_is_not_made_again() -> None:
    failed = [failed_after_load("a"), at(OLD, name="b"), at(OLD, name="c")]
    decision = decide(rollout(failed, settings=ROLLBACK, revisions=HISTORY, rollback=IN_GIT))
    assert decision.rollback is None  # recorded once; the spec is Git's to change
    assert decision.status is not None
    assert (decision.status["state"], decision.status["holdKind"]) == ("Paused", "RollbackInGit")
    message = decision.status["message"]
    assert message.startswith(f"paused: {TARGET} failed on a (a: bad)")
    assert "applied by Argo CD (field manager argocd-controller)" in message
    assert f"put revision 1 ({OLD}) back in Git" in message
    starts = [a.node for a in decision.actions if getattr(a, "phase_to", None) is Phase.CHECKING]
    assert starts == []  # b and c wait, whatever the failure budget says


def test_resume_goes_on_with_the_target_and_git_putting_the_revision_back_rolls_back() -> None:
    failed = [failed_after_load("a"), at(OLD, name="b")]
    resumed = decide(
        rollout(failed, settings=ROLLBACK, revisions=HISTORY, rollback=IN_GIT, resumed=TARGET)
    )
    assert resumed.status is not None
    assert resumed.status.get("holdKind") != "RollbackInGit"
    # Git put revision 1 back: the target is the record's `to`, and only its nodes move.
    pending_a = node("a", phase=Phase.PENDING, version=OLD, labels=targeted(TARGET))
    settings = dataclasses.replace(ROLLBACK, hold_after_first_node=True)
    back = decide(
        rollout(
            [pending_a, at(OLD, name="b")],
            settings=settings,
            target=OLD,
            revisions=HISTORY,
            rollback=IN_GIT,
        )
    )
    assert back.status is not None
    assert back.status["holdKind"] == "RollingBack"
