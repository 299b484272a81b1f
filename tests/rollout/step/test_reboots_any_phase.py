"""A reboot in any phase of a rollout (gpuctl/rollout/step/reboots.py `reboot_taken_up`).

KMM's loader runs at every new boot of a node its Module selects with a version label
(KMM v2.6.0 internal/controllers/nmc_reconciler.go: IsNodeRebooted, then a loader Pod whose
first act is `modprobe -r` of the in-tree list), whatever phase gpuctl has the node in. So a
node that carries this GPUDriver's target label and booted again is held and verified again
at the version KMM loads there, in every phase; a Failed one is held and stays Failed.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import Action, DeleteWorkerPods, HoldWorkers, PatchNode, RequestReport
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.input.records import BootRecord, encode_boot
from gpuctl.rollout.step.phases import step_any_verifying
from tests.rollout.fleet.test_rollback import HISTORY
from tests.rollout.step.test_reboots import BOOT_A, BOOT_B, KERNEL, in_tree
from tests.support.rollout_samples import (
    OLD,
    OLD_MODULE_VERSION,
    OPEN_CLIENT,
    TARGET,
    answered,
    loaded_labels,
    new_report,
    node,
    rollout,
)

VERIFIED_IN_A = encode_boot(BootRecord(BOOT_A, KERNEL))


def rebooted_in(phase: Phase, *, loaded: str, state_version: str, **extra: str) -> NodeFacts:
    """A node KMM loads at `loaded`, verified in boot A, now in boot B, in `phase`."""
    annotations = {names.VERIFIED_BOOT: VERIFIED_IN_A, **extra}
    facts = node(
        phase=phase,
        version=state_version,
        labels={**loaded_labels(loaded), names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE},
        annotations=annotations,
    )
    return dataclasses.replace(facts, boot_id=BOOT_B, kernel_version=KERNEL)


def writes_of(facts: NodeFacts) -> tuple[list[Action], PatchNode]:
    decision = decide(rollout([facts], revisions=HISTORY))
    [write] = [a for a in decision.actions if isinstance(a, PatchNode) and a.node == facts.name]
    return decision.actions, write


# Every place a node KMM loads can be in when it reboots, with the version KMM has loaded.
PLACES = [
    pytest.param(Phase.DONE, OLD, OLD, id="done-at-the-old-version-waiting-its-turn"),
    pytest.param(Phase.DONE, TARGET, TARGET, id="done-at-the-target"),
    pytest.param(Phase.PENDING, OLD, TARGET, id="pending"),
    pytest.param(Phase.BLOCKED, OLD, TARGET, id="blocked"),
    pytest.param(Phase.SKIPPED, OLD, TARGET, id="skipped"),
    pytest.param(Phase.CHECKING, OLD, TARGET, id="checking"),
    pytest.param(Phase.DRAINING, OLD, TARGET, id="draining"),
    pytest.param(Phase.PREPARING, OLD, TARGET, id="preparing"),
    pytest.param(Phase.LOADING, TARGET, TARGET, id="loading"),
    pytest.param(Phase.VERIFYING, TARGET, TARGET, id="verifying"),
]


@pytest.mark.parametrize(("phase", "loaded", "state_version"), PLACES)
def test_a_reboot_in_any_phase_holds_kmm_and_verifies_what_kmm_loads_there(
    phase: Phase, loaded: str, state_version: str
) -> None:
    facts = rebooted_in(phase, loaded=loaded, state_version=state_version)
    actions, write = writes_of(facts)
    assert actions.index(HoldWorkers(facts.name, held=True)) < actions.index(write)
    assert write.phase_to is Phase.VERIFYING
    assert write.annotations[names.STATE_VERSION] == loaded
    assert write.annotations[names.KMM_WORKER_HELD] == loaded
    assert write.annotations[names.REBOOTED] == f"boot 6f0c2a4e -> 9b1d77c0, kernel {KERNEL}"
    assert write.labels[names.DRIVER_READY_LABEL] is None  # GPU daemons leave first
    taken = json.loads(str(write.annotations[names.REBOOT_TAKEN_UP]))
    assert taken == {"bootID": BOOT_B, "kernel": KERNEL}
    if phase is not Phase.DONE:
        assert f"while {phase.value}" in str(write.annotations[names.REASON])


def test_a_failed_node_that_rebooted_is_held_and_stays_failed() -> None:
    facts = rebooted_in(Phase.FAILED, loaded=TARGET, state_version=TARGET, **{names.REASON: "x"})
    actions, write = writes_of(facts)
    assert actions[0] == HoldWorkers(facts.name, held=True)
    assert DeleteWorkerPods(facts.name) in actions
    assert write.phase_to is None  # stays Failed
    assert write.annotations[names.KMM_WORKER_HELD] == TARGET
    assert write.labels[names.DRIVER_READY_LABEL] is None
    assert "rebooted since: boot 6f0c2a4e -> 9b1d77c0" in str(write.annotations[names.REASON])


def test_a_failed_node_held_after_its_reboot_has_kmms_workers_deleted_until_none_is_left() -> None:
    """The pass that holds it does not see KMM's worker Pods there (they are read for held
    nodes only), and KMM may make one before the hold list is written: the passes after
    delete them, as a Blocked node's, and the node stays Failed."""
    facts = rebooted_in(Phase.FAILED, loaded=TARGET, state_version=TARGET, **{names.REASON: "x"})
    _, write = writes_of(facts)
    taken_up = {**facts.annotations, **write.annotations}
    held = dataclasses.replace(
        facts,
        annotations={k: v for k, v in taken_up.items() if v is not None},
        unfinished_workers=("kmm-worker-n1-gpu-gpu",),
    )
    actions = decide(rollout([held], revisions=HISTORY)).actions
    assert HoldWorkers(held.name, held=True) in actions
    assert DeleteWorkerPods(held.name) in actions
    assert not [a for a in actions if isinstance(a, PatchNode)]  # still Failed, as it was
    none_left = dataclasses.replace(held, unfinished_workers=())
    assert DeleteWorkerPods(held.name) not in decide(rollout([none_left])).actions


def test_a_reboot_taken_up_is_not_taken_up_again() -> None:
    taken = encode_boot(BootRecord(BOOT_B, KERNEL))
    for phase in (Phase.VERIFYING, Phase.BLOCKED, Phase.FAILED):
        facts = rebooted_in(phase, loaded=OLD, state_version=OLD, **{names.REBOOT_TAKEN_UP: taken})
        decision = decide(rollout([facts], revisions=HISTORY))
        assert HoldWorkers(facts.name, held=True) not in decision.actions
        assert not any(
            isinstance(a, PatchNode) and a.annotations.get(names.REBOOT_TAKEN_UP)
            for a in decision.actions
        )


def test_a_node_kmm_does_not_target_is_not_held() -> None:
    """Blocked in the checks of a first install: no KMM write yet, so KMM runs no loader at
    its boot (and a node of another GPUDriver's is that one's)."""
    first = node(phase=Phase.BLOCKED, annotations={names.VERIFIED_BOOT: VERIFIED_IN_A})
    first = dataclasses.replace(first, boot_id=BOOT_B, kernel_version=KERNEL)
    decision = decide(rollout([first]))
    assert HoldWorkers(first.name, held=True) not in decision.actions


def test_a_node_verified_again_at_the_old_version_is_done_there_then_waits_its_turn() -> None:
    """A node the rollout has not reached yet comes back at the version KMM loads there: its
    build is told by that revision's version (status.revisions), not the target's."""
    facts = rebooted_in(Phase.DONE, loaded=OLD, state_version=OLD)
    _, write = writes_of(facts)
    annotations = {**facts.annotations, **write.annotations}
    labels = {**facts.labels, **write.labels}
    reverifying = dataclasses.replace(
        node(
            phase=Phase.VERIFYING,
            version=OLD,
            labels={k: v for k, v in labels.items() if v is not None and k != names.STATE_LABEL},
            annotations={k: v for k, v in annotations.items() if v is not None},
        ),
        boot_id=BOOT_B,
        kernel_version=KERNEL,
        kmm_boot_id=BOOT_B,  # KMM's loader, let go, loaded OLD in this boot
    )
    old_live = dataclasses.replace(
        new_report(tag=f"xeb_{OLD_MODULE_VERSION}", srcversion="OLDSRC"), provenance="OUT_OF_TREE"
    )
    inp = rollout([reverifying], revisions=HISTORY)
    [done] = [
        a
        for a in step_any_verifying(inp, answered(reverifying, report=old_live)).actions
        if isinstance(a, PatchNode)
    ]
    assert done.phase_to is Phase.DONE
    assert done.annotations[names.STATE_VERSION] == OLD
    assert done.annotations[names.REBOOT_TAKEN_UP] is None
    # The target's build is not the old version's: not verified at OLD.
    new_live = dataclasses.replace(new_report(), provenance="OUT_OF_TREE")
    actions = step_any_verifying(inp, answered(reverifying, report=new_live)).actions
    assert not any(isinstance(a, PatchNode) and a.phase_to is Phase.DONE for a in actions)


def test_a_node_verified_again_at_the_old_version_keeps_its_place_until_verified() -> None:
    """Verifying at OLD after a reboot: the rollout does not take it to the target's checks
    meanwhile; Blocked by what that boot brought up: not placed anew (placement
    .rebooted_in_place)."""
    annotations = {names.REBOOTED: "boot 6f0c2a4e -> 9b1d77c0", names.KMM_WORKER_HELD: OLD}
    verifying = node(
        phase=Phase.VERIFYING, version=OLD, labels=loaded_labels(OLD), annotations=annotations
    )
    blocked = node(
        "n2",
        phase=Phase.BLOCKED,
        version=OLD,
        labels=loaded_labels(OLD),
        annotations={names.REASON_KIND: "rebooted-in-use", names.KMM_WORKER_HELD: OLD},
    )
    decision = decide(rollout([verifying], revisions=HISTORY))
    assert not [a for a in decision.actions if isinstance(a, PatchNode) and a.phase_to]
    # The Blocked one is neither placed anew (Pending at the target) nor started into the
    # target's checks: its agent is asked again; still in use, it stays Blocked, held; idle,
    # it is verified again at the version KMM loads there (which lets KMM's worker go).
    decision = decide(rollout([blocked], revisions=HISTORY))
    assert not [a for a in decision.actions if isinstance(a, PatchNode) and a.phase_to]
    assert RequestReport(blocked.name, blocked.attempt) in decision.actions
    busy = answered(blocked, report=in_tree(blockers=[OPEN_CLIENT]))
    decision = decide(rollout([busy], revisions=HISTORY))
    assert not [a for a in decision.actions if isinstance(a, PatchNode) and a.phase_to]
    idle = answered(blocked, report=in_tree())
    [again] = [
        a
        for a in decide(rollout([idle], revisions=HISTORY)).actions
        if isinstance(a, PatchNode) and a.phase_to
    ]
    assert again.phase_to is Phase.VERIFYING
    assert again.annotations[names.STATE_VERSION] == OLD
    assert names.REBOOTED in again.annotations


def test_an_opted_out_node_rebooted_in_use_keeps_its_driver_never_the_target() -> None:
    """Skipped (rollout: skip) and busy at its reboot: Blocked and held like any node, then,
    idle, verified again at the version KMM loads there; never taken to the target."""
    facts = rebooted_in(
        Phase.SKIPPED,
        loaded=OLD,
        state_version=TARGET,
        **{names.REBOOT_TAKEN_UP: encode_boot(BootRecord(BOOT_A, KERNEL))},
    )
    labels = {**facts.labels, names.OPT_OUT_LABEL: names.OPT_OUT_VALUE}
    blocked = dataclasses.replace(
        node(
            phase=Phase.BLOCKED,
            version=OLD,
            labels={k: v for k, v in labels.items() if k != names.STATE_LABEL},
            annotations={names.REASON_KIND: "rebooted-in-use", names.KMM_WORKER_HELD: OLD},
        ),
        boot_id=BOOT_B,
        kernel_version=KERNEL,
    )
    idle = answered(blocked, report=in_tree())
    moves = [
        a.phase_to
        for a in decide(rollout([idle], revisions=HISTORY)).actions
        if isinstance(a, PatchNode) and a.phase_to
    ]
    assert moves == [Phase.VERIFYING]
