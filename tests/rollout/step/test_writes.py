"""What every step shares (gpuctl/rollout/step/writes.py), seen through the steps that use
it: unknown ResourceClaims block a node, and a step's timeout counts only what this
coordinator watched."""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.draining import step_draining
from gpuctl.rollout.step.loading import step_loading
from gpuctl.rollout.step.verifying import step_verifying
from tests.rollout.step.step_samples import only_patch, verifying
from tests.support.rollout_samples import (
    OLD,
    PF,
    answered,
    loaded_labels,
    node,
    report,
    rollout,
    targeted,
)

# -- fresh truth --------------------------------------------------------------------------


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
