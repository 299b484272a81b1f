"""Devices opened after the check hold KMM's worker off the node (coordinator/rollout/
worker_hold.py): when, what is written, what is cleaned up, and how the hold is let go."""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import (
    DeleteWorkerPods,
    HoldWorkers,
    NudgeKmm,
    PatchNode,
    RequestReport,
)
from gpuctl.rollout.decide import decide
from gpuctl.rollout.step.loading import step_loading
from gpuctl.rollout.step.worker_hold import cleanup
from tests.support.rollout_samples import (
    KMM,
    NONE,
    OLD,
    OPEN_CLIENT,
    TARGET,
    answered,
    new_report,
    node,
    report,
    rollout,
    targeted,
)

LOADING_LABELS = {**targeted(), KMM.ready: "", KMM.version_ready: OLD}


def test_a_client_on_the_old_module_during_loading_holds_kmms_worker_off() -> None:
    loading = answered(
        node(phase=Phase.LOADING, labels=LOADING_LABELS), report=report(blockers=[OPEN_CLIENT])
    )
    actions = step_loading(rollout([loading]), loading).actions
    blocked, hold = actions
    assert isinstance(blocked, PatchNode)
    assert blocked.phase_to is Phase.BLOCKED
    assert blocked.annotations[names.KMM_WORKER_HELD] == TARGET
    reason = str(blocked.annotations[names.REASON])
    assert reason.startswith("opened after the check, before KMM acted: 1 process holds")
    assert "pid 4242 (ollama)" in reason
    assert blocked.labels == {names.STATE_LABEL: "Blocked"}  # KMM's order stands
    assert blocked.unschedulable is None  # cordon kept
    assert hold == HoldWorkers(loading.name, held=True)  # the Blocked node's cleanup deletes


def test_the_removal_is_held_like_a_load() -> None:
    unloading = dataclasses.replace(
        answered(
            node(phase=Phase.LOADING, version=NONE, labels={KMM.ready: "", KMM.version_ready: OLD}),
            report=report(blockers=[OPEN_CLIENT]),
        ),
        wanted=False,
    )
    actions = step_loading(rollout([unloading]), unloading).actions
    assert HoldWorkers(unloading.name, held=True) in actions


def test_no_hold_once_the_new_module_is_live_or_none_is() -> None:
    # The new module, opened by its first client before KMM's ready label: not the old one.
    new = answered(
        node(phase=Phase.LOADING, labels=LOADING_LABELS), report=new_report(blockers=[OPEN_CLIENT])
    )
    gone = answered(
        node(phase=Phase.LOADING, labels=LOADING_LABELS),
        report=report(state="NOT_LOADED", blockers=[OPEN_CLIENT]),
    )
    for facts in (new, gone):
        actions = step_loading(rollout([facts]), facts).actions
        assert not [a for a in actions if isinstance(a, (PatchNode, HoldWorkers))], actions


def test_until_kmm_acts_the_agent_is_asked_again() -> None:
    loading = node(phase=Phase.LOADING, labels=LOADING_LABELS)
    assert step_loading(rollout([loading]), loading).actions == [
        RequestReport(loading.name, loading.attempt)
    ]


def test_a_held_node_deletes_kmms_workers_until_none_is_left() -> None:
    held = node(
        phase=Phase.BLOCKED, labels=LOADING_LABELS, annotations={names.KMM_WORKER_HELD: TARGET}
    )
    with_workers = dataclasses.replace(held, unfinished_workers=("kmm-worker-n1-gpu-gpu",))
    assert cleanup(with_workers).actions == [
        HoldWorkers(held.name, held=True),
        DeleteWorkerPods(held.name),
    ]
    assert cleanup(held).actions == []
    not_held = dataclasses.replace(with_workers, annotations={})
    assert cleanup(not_held).actions == []


def test_the_next_kmm_write_lets_the_hold_go_first_and_loading_nudges_kmm() -> None:
    facts = answered(
        node(
            phase=Phase.PREPARING,
            labels=LOADING_LABELS,
            annotations={names.KMM_WORKER_HELD: TARGET, names.CORDONED_BY_GPUCTL: "true"},
            unschedulable=True,
        ),
        report=report(),
    )
    actions = decide(rollout([facts])).actions
    release, write = actions[0], actions[1]
    assert release == HoldWorkers(facts.name, held=False)
    assert isinstance(write, PatchNode)
    assert write.phase_to is Phase.LOADING
    assert write.annotations[names.KMM_WORKER_HELD] is None
    assert write.annotations[names.KMM_WORKER_RELEASED] == "true"
    released = node(
        phase=Phase.LOADING,
        labels=LOADING_LABELS,
        annotations={names.KMM_WORKER_RELEASED: "true"},
    )
    assert NudgeKmm(released.name) in step_loading(rollout([released]), released).actions
    making = dataclasses.replace(released, unfinished_workers=("kmm-worker-n1-gpu-gpu",))
    assert NudgeKmm(making.name) not in step_loading(rollout([making]), making).actions
