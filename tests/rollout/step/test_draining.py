"""The Draining step (gpuctl/rollout/step/draining.py): the node's GPU pods wait or are
evicted, then Preparing; a drain past its timeout blocks, and only gpuctl's own cordon is
released."""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import EvictPods
from gpuctl.rollout.step.draining import step_draining
from tests.rollout.step.step_samples import POD, only_patch, settings
from tests.support.rollout_samples import OLD, node, rollout, targeted


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


# -- fresh truth --------------------------------------------------------------------------


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
