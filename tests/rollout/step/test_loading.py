"""The Loading step (gpuctl/rollout/step/loading.py): KMM acts on the KMM write, then
Verifying; a write someone undid goes back to Checking, a load past its timeout fails and is
taken back where nothing was loaded."""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import RequestReport
from gpuctl.rollout.step.loading import LOAD_WITHDRAWN, step_loading
from gpuctl.rollout.step.worker_hold import LOADING_CHECK_SECONDS
from tests.rollout.step.step_samples import only_patch
from tests.support.rollout_samples import KMM, OLD, TARGET, loaded_labels, node, rollout, targeted


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
