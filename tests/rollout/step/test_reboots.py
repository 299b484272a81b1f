"""A Done node that rebooted is verified again before it counts as Done (gpuctl/rollout/
reboots.py): the boot recorded at Done, a new boot taking the node back to Verifying with
KMM's worker held, and what the agent's answer then decides."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
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
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.input.facts import INSPECT, CallState, NodeFacts, ReportFacts, RolloutInput
from gpuctl.rollout.input.records import BootRecord, encode_boot
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.step.phases import step_any_verifying
from gpuctl.rollout.step.reboots import boot_recorded, reboot_taken_up, step_reverifying
from gpuctl.rollout.step.verifying import module_mismatch
from tests.rollout.fleet.test_rollback import HISTORY
from tests.support.rollout_samples import (
    OLD,
    OPEN_CLIENT,
    TARGET,
    answered,
    loaded_labels,
    new_report,
    node,
    report,
    rollout,
    targeted,
)

BOOT_A = "6f0c2a4e-1b7d-4c55-9a3e-0d2b7c1e9f44"
BOOT_B = "9b1d77c0-5e2f-4a61-8c3d-2f4e6a8b0c12"
KERNEL = "6.8.0-45-generic"
NEW_KERNEL = "6.8.0-47-generic"
REBOOTED = "boot 6f0c2a4e -> 9b1d77c0, kernel 6.8.0-45-generic -> 6.8.0-47-generic"


def booted(facts: NodeFacts, boot: str = BOOT_B, kernel: str = NEW_KERNEL) -> NodeFacts:
    return dataclasses.replace(facts, boot_id=boot, kernel_version=kernel)


def kmm_loaded_in(facts: NodeFacts, boot: str) -> NodeFacts:
    """KMM's NodeModulesConfig records its loader ran in `boot` (status.modules[].bootId)."""
    return dataclasses.replace(facts, kmm_boot_id=boot)


def done(
    *, recorded: str | None = encode_boot(BootRecord(BOOT_A, KERNEL)), ready: bool = True
) -> NodeFacts:
    annotations = {names.VERIFIED_BOOT: recorded} if recorded is not None else {}
    labels = loaded_labels()
    if ready:
        labels[names.DRIVER_READY_LABEL] = names.DRIVER_READY_VALUE
    return node(phase=Phase.DONE, labels=labels, annotations=annotations)


def reverifying(*, held: bool = True, **annotations: str) -> NodeFacts:
    extra = {names.REBOOTED: REBOOTED, names.CORDONED_BY_GPUCTL: "true", **annotations}
    if held:
        extra[names.KMM_WORKER_HELD] = TARGET
    facts = node(phase=Phase.VERIFYING, labels=loaded_labels(), annotations=extra)
    return booted(dataclasses.replace(facts, unschedulable=True))


def out_of_tree(**overrides: object) -> ReportFacts:
    return dataclasses.replace(new_report(**overrides), provenance="OUT_OF_TREE")


def in_tree(**overrides: object) -> ReportFacts:
    values: dict[str, object] = {"tag": "", "srcversion": "INTREESRC", **overrides}
    return dataclasses.replace(report(**values), provenance="IN_TREE")  # type: ignore[arg-type]


def after_reboot(inp: RolloutInput, facts: NodeFacts) -> StepResult:
    """What a pass does about a node's boot: a reboot taken up, or a Done node's record."""
    taken = reboot_taken_up(inp, facts)
    return taken[0] if taken is not None else boot_recorded(inp, facts)


def writes(actions: Sequence[object]) -> list[PatchNode]:
    return [a for a in actions if isinstance(a, PatchNode)]


def checked_for_the_target(facts: NodeFacts) -> bool:
    """Whether the rebooted node's pass sends it through the checks (Checking)."""
    moved = writes(step_reverifying(rollout([facts]), facts).actions)
    return any(w.phase_to is Phase.CHECKING for w in moved)


def at_the_target(facts: NodeFacts) -> NodeFacts:
    """The node labelled at the Module's version (KMM writes its config afresh there)."""
    return dataclasses.replace(facts, labels={**facts.labels, **targeted(TARGET)})


# -- the boot a Done node was verified in ---------------------------------------------------


def test_the_done_write_records_the_boot_it_was_verified_in() -> None:
    verifying = booted(node(phase=Phase.VERIFYING, labels=loaded_labels()), BOOT_A, KERNEL)
    verifying = kmm_loaded_in(verifying, BOOT_A)
    [write] = writes(
        step_any_verifying(rollout([verifying]), answered(verifying, report=new_report())).actions
    )
    assert write.phase_to is Phase.DONE
    assert json.loads(str(write.annotations[names.VERIFIED_BOOT])) == {
        "bootID": BOOT_A,
        "kernel": KERNEL,
    }


def test_the_same_boot_changes_nothing_and_an_unknown_boot_is_not_guessed() -> None:
    same = booted(done(), BOOT_A, KERNEL)
    assert after_reboot(rollout([same]), same).actions == []
    unknown = done()  # the Node reports no bootID: nothing can be compared
    assert after_reboot(rollout([unknown]), unknown).actions == []


def test_a_node_done_before_this_build_gets_its_boot_recorded_on_its_agents_word() -> None:
    """No record of the boot it was verified in: its agent is asked; the module verified and
    KMM's own record of its load in this boot record the boot, without a step."""
    legacy = booted(done(recorded=None), BOOT_A, KERNEL)
    [ask] = after_reboot(rollout([legacy]), legacy).actions
    assert isinstance(ask, RequestReport)
    verified = answered(kmm_loaded_in(legacy, BOOT_A), report=out_of_tree())
    [write] = after_reboot(rollout([verified]), verified).actions
    assert isinstance(write, PatchNode)
    assert write.phase_to is None
    assert write.labels == {}
    assert write.annotations == {names.VERIFIED_BOOT: encode_boot(BootRecord(BOOT_A, KERNEL))}


def test_a_node_done_before_this_build_not_verified_now_is_verified_again() -> None:
    """Its agent shows the in-tree module (a reboot the older build never saw), or KMM's
    record is of another boot: held and verified again, never recorded as verified."""
    legacy = booted(done(recorded=None), BOOT_A, KERNEL)
    for facts in (
        answered(kmm_loaded_in(legacy, BOOT_A), report=in_tree()),
        answered(kmm_loaded_in(legacy, "a-boot-before"), report=out_of_tree()),
    ):
        hold, write = after_reboot(rollout([facts]), facts).actions
        assert hold == HoldWorkers(facts.name, held=True)
        assert isinstance(write, PatchNode)
        assert write.phase_to is Phase.VERIFYING
        assert "the boot it was verified in is not recorded" in str(write.annotations[names.REASON])


def test_a_done_node_without_the_driver_ready_label_gets_it_without_a_step() -> None:
    """An older gpuctl wrote no driver-ready label (or someone took it off): a Done node in
    the boot it was verified in gets it, the GPU daemons selecting on it start there."""
    legacy = booted(done(ready=False), BOOT_A, KERNEL)
    [write] = after_reboot(rollout([legacy]), legacy).actions
    assert isinstance(write, PatchNode)
    assert write.phase_to is None
    assert write.labels == {names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}
    assert write.annotations == {}
    rebooted = booted(done(ready=False))  # rebooted: verified again first, no label before
    [_hold, again] = after_reboot(rollout([rebooted]), rebooted).actions
    assert isinstance(again, PatchNode)
    assert again.phase_to is Phase.VERIFYING


# -- a new boot -----------------------------------------------------------------------------


def test_a_new_boot_holds_kmms_worker_and_verifies_the_node_again_cordoned() -> None:
    rebooted = booted(done())
    hold, write = after_reboot(rollout([rebooted]), rebooted).actions
    assert hold == HoldWorkers(rebooted.name, held=True)  # before anything else
    assert isinstance(write, PatchNode)
    assert write.phase_from is Phase.DONE
    assert write.phase_to is Phase.VERIFYING
    assert write.annotations[names.REBOOTED] == REBOOTED
    assert write.annotations[names.KMM_WORKER_HELD] == TARGET
    assert write.annotations[names.STATE_VERSION] == TARGET
    assert write.unschedulable is True
    assert write.annotations[names.CORDONED_BY_GPUCTL] == "true"
    assert write.event is not None
    assert write.event.kind == "Warning"
    assert str(write.annotations[names.REASON]).startswith(f"rebooted ({REBOOTED}): KMM's worker")


def test_an_admins_cordon_is_kept_as_theirs() -> None:
    rebooted = dataclasses.replace(booted(done()), unschedulable=True)
    _, write = after_reboot(rollout([rebooted]), rebooted).actions
    assert isinstance(write, PatchNode)
    assert write.unschedulable is None
    assert write.annotations[names.CORDONED_BY_GPUCTL] == "false"


def test_an_unreadable_boot_record_is_verified_again_not_trusted() -> None:
    edited = booted(done(recorded="not json"))
    _, write = after_reboot(rollout([edited]), edited).actions
    assert isinstance(write, PatchNode)
    assert write.phase_to is Phase.VERIFYING
    assert "annotation verified-boot is not a boot record" in str(write.annotations[names.REASON])


def test_decide_rechecks_every_done_node_and_the_rollout_is_no_longer_complete() -> None:
    steady = dataclasses.replace(booted(done(), BOOT_A, KERNEL), name="a")
    rebooted = dataclasses.replace(booted(done()), name="b")
    decision = decide(rollout([steady, rebooted]))
    assert [w.node for w in writes(decision.actions)] == ["b"]
    after = decide(rollout([steady, reverifying()]))
    assert after.status is not None
    assert after.status["state"] != "Complete"
    [listed] = after.status["nodes"]
    assert listed["phase"] == "Verifying"


# -- what the agent's answer decides ---------------------------------------------------------


def test_the_in_tree_module_in_use_stays_held_and_blocks_naming_the_client() -> None:
    facts = answered(reverifying(), report=in_tree(blockers=[OPEN_CLIENT]))
    hold, blocked, delete = step_reverifying(rollout([facts]), facts).actions
    assert hold == HoldWorkers(facts.name, held=True)
    assert delete == DeleteWorkerPods(facts.name)
    assert isinstance(blocked, PatchNode)
    assert blocked.phase_to is Phase.BLOCKED
    assert blocked.annotations[names.REASON_KIND] == BlockKind.REBOOTED_IN_USE.value
    assert blocked.annotations[names.KMM_WORKER_HELD] == TARGET
    assert blocked.annotations[names.REBOOTED] is None  # the normal path takes it from here
    reason = str(blocked.annotations[names.REASON])
    assert "module xe is the kernel's in-tree one, in use: 1 process holds" in reason
    assert "pid 4242 (ollama)" in reason
    assert blocked.unschedulable is None  # the cordon stays


def test_nothing_loaded_and_idle_lets_kmms_worker_go_through_decide() -> None:
    facts = answered(reverifying(), report=report(state="NOT_LOADED", tag="", srcversion=""))
    decision = decide(rollout([facts]))
    let_go = decision.actions.index(HoldWorkers(facts.name, held=False))
    [write] = writes(decision.actions)
    assert decision.actions.index(write) == let_go + 1  # the hold goes first
    assert write.phase_to is Phase.VERIFYING
    assert write.annotations[names.KMM_WORKER_HELD] is None
    assert write.annotations[names.KMM_WORKER_RELEASED] == "true"
    assert names.REBOOTED not in write.annotations  # kept: the verification goes on


def test_once_let_go_kmm_is_nudged_and_a_device_opened_meanwhile_holds_it_again() -> None:
    released = reverifying(held=False, **{names.KMM_WORKER_RELEASED: "true"})
    waiting = answered(released, report=report(state="NOT_LOADED", tag="", srcversion=""))
    actions = step_reverifying(rollout([waiting]), waiting).actions
    assert NudgeKmm(released.name) in actions
    assert not writes(actions)
    opened = answered(released, report=in_tree(blockers=[OPEN_CLIENT]))
    actions = step_reverifying(rollout([opened]), opened).actions
    assert HoldWorkers(released.name, held=True) in actions
    [blocked] = writes(actions)
    assert blocked.phase_to is Phase.BLOCKED


def test_the_module_verified_before_is_done_again_uncordoned_with_the_new_boot() -> None:
    autoloads = report_pb.InTreeAutoload(
        state=report_pb.InTreeAutoload.AUTOLOADS, sources=["no blacklist or install line for xe"]
    )
    live = out_of_tree()
    live.report.in_tree_autoload.CopyFrom(autoloads)
    facts = answered(kmm_loaded_in(reverifying(), BOOT_B), report=live)
    decision = decide(rollout([facts]))
    assert decision.actions[0] == HoldWorkers(facts.name, held=False)
    [write] = writes(decision.actions)
    assert write.phase_to is Phase.DONE
    assert write.unschedulable is False
    assert write.annotations[names.KMM_WORKER_HELD] is None
    assert write.annotations[names.REBOOTED] is None
    assert json.loads(str(write.annotations[names.VERIFIED_BOOT]))["bootID"] == BOOT_B
    reason = str(write.annotations[names.REASON])
    assert reason.startswith(f"verified again after the reboot ({REBOOTED}): the out-of-tree xe")
    assert "WARNING: the in-tree xe loads by itself at boot (no blacklist" in reason


def test_an_unknown_provenance_is_never_taken_for_the_verified_module() -> None:
    unknown = dataclasses.replace(new_report(), provenance="UNKNOWN")
    facts = answered(reverifying(held=False), report=unknown)
    actions = step_reverifying(rollout([facts]), facts).actions
    assert not writes(actions)


def test_not_verified_in_time_fails_held_again_and_does_not_roll_back() -> None:
    settings = RolloutSettings(hold_after_first_node=False, on_node_failure="Rollback")
    late = answered(reverifying(), report=report(state="NOT_LOADED", tag="", srcversion=""))
    late = dataclasses.replace(
        late, annotations={**late.annotations, names.SINCE: "2026-11-29T11:00:00Z"}
    )
    waiting = dataclasses.replace(late, calls={})
    actions = step_reverifying(rollout([waiting], settings=settings), waiting).actions
    hold, write, delete = actions
    assert hold == HoldWorkers(waiting.name, held=True)
    assert delete == DeleteWorkerPods(waiting.name)
    assert isinstance(write, PatchNode)
    assert write.phase_to is Phase.FAILED
    assert write.annotations[names.KMM_WORKER_HELD] == TARGET
    assert names.REBOOTED not in write.annotations  # kept: it says why
    assert str(write.annotations[names.REASON]).startswith(
        "not verified within 5m after the reboot"
    )
    failed = dataclasses.replace(
        waiting,
        labels={**waiting.labels, names.STATE_LABEL: "Failed"},
    )
    decision = decide(rollout([failed], settings=settings, revisions=HISTORY))
    assert decision.rollback is None


def test_kmm_slow_past_the_timeout_with_nothing_in_use_is_waited_for_not_failed() -> None:
    """KMM's worker let go, nothing loaded: a pull, build or sign of the new kernel's image
    takes longer than timeouts.verify. Failing would hold KMM off a node that has nothing in
    use (no driver until `rollout retry`) and spend the failure budget on KMM being slow: the
    node waits, saying what KMM waits for."""
    released = reverifying(held=False, **{names.KMM_WORKER_RELEASED: "true"})
    late = dataclasses.replace(
        released,
        annotations={**released.annotations, names.SINCE: "2026-11-29T11:00:00Z"},
        target_image="r/xe:v7-6.8.0-47-generic",
        image_state="NeedsBuilding",
    )
    facts = answered(late, report=report(state="NOT_LOADED", tag="", srcversion=""))
    actions = step_reverifying(rollout([facts]), facts).actions
    assert HoldWorkers(facts.name, held=True) not in actions
    [write] = writes(actions)
    assert write.phase_to is None  # still Verifying: nothing failed
    reason = str(write.annotations[names.REASON])
    assert "nothing holds the device, so KMM is let finish" in reason
    assert "KMM's ModuleImagesConfig says NeedsBuilding of r/xe:v7-6.8.0-47-generic" in reason
    said = dataclasses.replace(facts, annotations={**facts.annotations, names.REASON: reason})
    assert not writes(step_reverifying(rollout([said]), said).actions)  # said once
    # The agent asked again, its answer not in yet (a loaded machine): waited for, not failed.
    asking = CallState(INSPECT, said.attempt, started_at=0.0)
    in_flight = dataclasses.replace(said, calls={INSPECT: asking})
    assert not writes(step_reverifying(rollout([in_flight]), in_flight).actions)
    # Never an answer in this boot (KMM not let go): past the timeout that is a failure.
    not_let_go = {k: v for k, v in in_flight.annotations.items() if k != names.KMM_WORKER_RELEASED}
    unanswered = dataclasses.replace(in_flight, annotations=not_let_go)
    [failed] = writes(step_reverifying(rollout([unanswered]), unanswered).actions)
    assert failed.phase_to is Phase.FAILED
    opened = answered(late, report=in_tree(blockers=[OPEN_CLIENT]))
    [blocked] = writes(step_reverifying(rollout([opened]), opened).actions)
    assert blocked.phase_to is Phase.BLOCKED  # something in use: held again


def test_a_rebooted_node_kmm_will_load_nothing_on_goes_through_the_checks_for_the_target() -> None:
    """The world run's seed 3: verified again at OLD, the version its label names, after a
    reboot; but the Module asks for TARGET and KMM's NodeModulesConfig records no load of it
    there (its entry went with an untolerated taint): KMM's module reconciler leaves a node
    labelled with another version as it is, so nothing would ever load. Let go, nothing in
    use: the node is checked for the target instead of waiting on KMM for ever."""
    stale = node(
        phase=Phase.VERIFYING,
        version=OLD,
        labels=targeted(OLD),
        annotations={names.REBOOTED: REBOOTED, names.KMM_WORKER_RELEASED: "true"},
    )
    stale = dataclasses.replace(booted(stale), kmm_boot_id="")
    facts = answered(stale, report=report(state="NOT_LOADED", tag="", srcversion=""))
    [write] = writes(step_reverifying(rollout([facts]), facts).actions)
    assert write.phase_to is Phase.CHECKING
    assert write.annotations[names.STATE_VERSION] == TARGET
    reason = str(write.annotations[names.REASON])
    assert f"KMM loads nothing here at {OLD}" in reason
    # KMM's record not read, or a load of it recorded: KMM may act, so it is waited for.
    for boot in (None, "0a1b2c3d"):
        assert not checked_for_the_target(dataclasses.replace(facts, kmm_boot_id=boot))
    # Labelled at the Module's version: KMM loads it.
    assert not checked_for_the_target(at_the_target(facts))


def test_a_node_behind_the_target_that_rebooted_into_a_new_kernel_is_never_let_go() -> None:
    """The world run: a node at OLD (the rollout had not reached it) reboots into a new kernel.
    KMM keeps its NodeModulesConfig's config for the old kernel (its label is not the
    Module's version: prepareNodeSchedulingData leaves it), so its loader would take the
    in-tree xe out, then fail for ever ("Module xe not found in directory
    .../lib/modules/<new kernel>"). Its worker stays held: the node is checked for the target,
    which KMM configures for the kernel it runs."""
    behind = node(
        phase=Phase.VERIFYING,
        version=OLD,
        labels=targeted(OLD),
        annotations={names.REBOOTED: REBOOTED, names.KMM_WORKER_HELD: OLD},
    )
    behind = dataclasses.replace(booted(behind), kmm_boot_id="", kmm_kernel=KERNEL)
    facts = answered(behind, report=in_tree(state="LIVE"))
    result = step_reverifying(rollout([facts]), facts)
    [write] = writes(result.actions)
    assert write.phase_to is Phase.CHECKING
    assert write.annotations[names.STATE_VERSION] == TARGET
    assert f"KMM configures {OLD} for kernel {KERNEL}, not the {NEW_KERNEL}" in str(
        write.annotations[names.REASON]
    )
    assert not any(isinstance(a, HoldWorkers) and not a.held for a in result.actions)
    # KMM's config for the kernel the node runs, or not read, or the node at the Module's
    # version (KMM writes its config afresh): KMM's loader is let go as before.
    for kernel in (NEW_KERNEL, None):
        assert not checked_for_the_target(dataclasses.replace(facts, kmm_kernel=kernel))
    assert not checked_for_the_target(at_the_target(facts))


def test_the_held_nodes_kmm_workers_are_deleted_while_it_waits_for_its_agent() -> None:
    facts = dataclasses.replace(reverifying(), unfinished_workers=("xe-worker-abc",))
    actions = step_reverifying(rollout([facts]), facts).actions
    assert actions[:2] == [HoldWorkers(facts.name, held=True), DeleteWorkerPods(facts.name)]


def test_no_verification_takes_the_in_tree_module_for_the_target() -> None:
    facts = node(phase=Phase.VERIFYING, labels=loaded_labels())
    live = in_tree(srcversion="")  # an in-tree module without a srcversion file
    assert module_mismatch(rollout([facts]), facts, live) == "module xe is the kernel's in-tree one"


def test_an_answer_of_the_verification_before_the_reboot_is_not_this_boots() -> None:
    """The reboot seen within the second of the node's last verification: the same phase,
    since and version, but that verification's answer says nothing of this boot."""
    before = answered(node(phase=Phase.VERIFYING, labels=loaded_labels()), report=out_of_tree())
    rebooted = dataclasses.replace(
        before, annotations={**before.annotations, names.REBOOTED: REBOOTED}
    )
    assert rebooted.call(INSPECT) is None


# -- KMM's own record of the boot (NodeModulesConfig status.modules[].bootId) ----------------


def test_the_verified_module_without_kmms_load_in_this_boot_is_not_done() -> None:
    """A host copy of the same build (DKMS) live at boot, or a loader killed after insmod:
    the module is the one verified, KMM's ready labels are on, but KMM records its loader in
    the boot before. KMM will run its loader there: idle, it is let go to; never Done."""
    facts = answered(kmm_loaded_in(reverifying(), BOOT_A), report=out_of_tree())
    decision = decide(rollout([facts]))
    [write] = writes(decision.actions)
    assert write.phase_to is Phase.VERIFYING
    assert write.annotations[names.KMM_WORKER_RELEASED] == "true"
    assert "not in this boot" in str(write.annotations[names.REASON])
    busy = answered(
        kmm_loaded_in(reverifying(), BOOT_A), report=out_of_tree(blockers=[OPEN_CLIENT])
    )
    [blocked] = writes(decide(rollout([busy])).actions)
    assert blocked.phase_to is Phase.BLOCKED
    assert blocked.annotations[names.KMM_WORKER_HELD] == TARGET
    unread = answered(dataclasses.replace(reverifying(), kmm_boot_id=None), report=out_of_tree())
    assert not any(w.phase_to is Phase.DONE for w in writes(decide(rollout([unread])).actions))


def test_a_first_verification_waits_for_kmms_record_of_this_boot() -> None:
    verifying = booted(node(phase=Phase.VERIFYING, labels=loaded_labels()), BOOT_A, KERNEL)
    for record in (None, "", BOOT_B):
        facts = answered(dataclasses.replace(verifying, kmm_boot_id=record), report=new_report())
        assert not writes(step_any_verifying(rollout([facts]), facts).actions), record


def test_a_node_done_before_this_build_waits_while_kmms_record_is_not_read() -> None:
    """KMM's NodeModulesConfigs not read (yet, or not allowed): the boot is not recorded, nor
    the node verified again on that alone; it stays as the older build left it."""
    legacy = booted(done(recorded=None), BOOT_A, KERNEL)
    unread = answered(dataclasses.replace(legacy, kmm_boot_id=None), report=out_of_tree())
    assert not writes(after_reboot(rollout([unread]), unread).actions)
