"""One node's step of the rollout: from its phase and facts to the next action (pure).

Each in-progress phase has a function here (Verifying's is in step/verifying.py). Every transition
is one PatchNode that writes the new phase with everything the next step relies on (cordon,
the records of what the node looked like, the KMM write), so a restart finds either the old
step (and repeats its read-only or idempotent part) or the new one, never half of one. Agent
answers belong to the step's attempt (phase, since, version): after a restart the step simply
asks again.

The same steps serve both paths. A wanted node is taken to the target version: Checking (a
fresh report, pods, claims) → Draining (cordon, records, pods and claims gone) → Preparing
(the agent prepares, or a fresh report shows nothing holds the devices) → Loading (the KMM
write sets names.TARGET_LABEL and KMM's version label; KMM unloads the old module and loads
the new) → Verifying → Done. A node the GPUDriver no longer wants but that KMM loads for it
takes the removal path (version names.REMOVAL_VERSION): the same Checking, Draining and
Preparing, then the KMM write removes both labels (Loading: KMM unloads), Verifying checks the
module is gone, and the node leaves the rollout.

The KMM write is decided only on an agent answer requested in this step's attempt and at most
FRESH_REPORT_SECONDS old, with the GPU pods and claims read for this pass; claims that cannot
be read (the API not served or failing) block the node, as does a node whose agent does not
answer. Blocked (uncordoned unless the node was already changed, auto-retried when its blocker
goes away) means "something outside gpuctl holds the node"; Failed (kept cordoned, counted
against the failure budget, retried by `gpuctl rollout retry`) means a step went wrong or
timed out.
"""

from __future__ import annotations

import dataclasses

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import EvictPods, PatchNode, SendPrepare
from gpuctl.rollout.input.facts import (
    INSPECT,
    PREPARE,
    CallState,
    NodeFacts,
    PrepareFacts,
    ReportFacts,
    RolloutInput,
)
from gpuctl.rollout.input.records import (
    RecordError,
    decode_bound,
    decode_changes,
    decode_vfs,
    encode_bound,
    encode_changes,
    encode_vfs,
    merge_changes,
    reconstructed_changes,
)
from gpuctl.rollout.reasons import Block, BlockKind
from gpuctl.rollout.step.kernel_proof import kernel_proof, probes_done
from gpuctl.rollout.step.pause import (
    PAUSE_POLL_SECONDS,
    drained_pods,
    not_selecting,
    not_selecting_block,
    not_selecting_record,
    pausable_on_node,
    pause_write,
)
from gpuctl.rollout.step.reboots import step_reverifying
from gpuctl.rollout.step.verifying import step_verifying
from gpuctl.rollout.step.worker_hold import (
    ask_again,
    hold,
    listed_hold_words,
    nudge_while_released,
    opened_since_the_check,
    released_write,
)
from gpuctl.rollout.step.writes import (
    CALL_RETRY_SECONDS,
    EVICT_RETRY_SECONDS,
    FRESH_REPORT_SECONDS,
    MODULE_LIVE,
    NOT_READY,
    StepResult,
    ask_report,
    blocked,
    claims_unknown,
    cordon,
    drain_block,
    drain_words,
    due,
    duration_words,
    epoch,
    failed,
    foreign_target,
    image_not_ready,
    judged_clients,
    kmm_loaded,
    kmm_write_labels,
    preflight_block,
    removing,
    report_block,
    step_elapsed,
    transition,
    unfixable_block,
    written,
)

# -- Checking -----------------------------------------------------------------------------


def _pass_records(
    node: NodeFacts, report: ReportFacts, module_driver: str
) -> dict[str, str | None]:
    """What the node looked like before anything changes, written only once per pass."""
    records: dict[str, str | None] = {}
    if names.BOUND_BEFORE not in node.annotations:
        records[names.BOUND_BEFORE] = encode_bound(report.bound_to(module_driver))
    if names.VFS_BEFORE not in node.annotations:
        records[names.VFS_BEFORE] = encode_vfs(report.vfs)
    if names.SRCVERSION_BEFORE not in node.annotations:
        live = report.module_state == MODULE_LIVE
        records[names.SRCVERSION_BEFORE] = report.srcversion if live else ""
    if names.IMAGE_BEFORE not in node.annotations:
        records[names.IMAGE_BEFORE] = node.annotations.get(names.DRIVER_IMAGE, "")
    return records


def _enter_draining(inp: RolloutInput, node: NodeFacts, report: ReportFacts) -> PatchNode:
    """Cordon, pause the node's GPU daemons (step/pause.py) and record the pass, in one write."""
    annotations = _pass_records(node, report, inp.module_driver)
    labels, paused = pause_write(inp, node, judged_clients(inp, report, node))
    annotations.update(paused)
    unschedulable = cordon(node, annotations) if inp.settings.cordon else None
    reason = "cordoned" if inp.settings.cordon else "not cordoned (rollout.cordon is false)"
    if labels or inp.settings.pause.declared:
        reason += f", {names.DRIVER_READY_LABEL} off (GPU daemons paused)"
    waiting = drain_words(inp, dataclasses.replace(node, annotations=_merged(node, paused)))
    reason += f"; waiting for {waiting}" if waiting else ""
    return transition(
        inp,
        node,
        Phase.DRAINING,
        reason,
        version=inp.target_for(node),
        labels=labels,
        annotations=annotations,
        unschedulable=unschedulable,
    )


def _merged(node: NodeFacts, annotations: dict[str, str | None]) -> dict[str, str]:
    """The node's annotations with `annotations` written."""
    merged = {**node.annotations, **annotations}
    return {k: v for k, v in merged.items() if v is not None}


def _cannot_go(inp: RolloutInput, node: NodeFacts) -> Block | None:
    """What blocks the node whatever the agent says (None when nothing does)."""
    if not node.ready:
        return NOT_READY
    unknown = claims_unknown(node)
    if unknown is not None:
        return unknown
    if not removing(inp.target_for(node)):
        return foreign_target(inp, node)
    return None


def _stops_before_asking(
    inp: RolloutInput, node: NodeFacts, result: StepResult, elapsed: float
) -> bool:
    """What stops the check before the agent is asked: whatever blocks the node whatever the
    agent says; and a reload whose image KMM has not found, or that is not proven yet to
    hold the node's kernel's modules (step/kernel_proof.py), which waits (KMM may still be pulling
    it, the probe running) up to the check's timeout, then is Blocked: nothing is unloaded.
    An image proven to lack them is Blocked at once."""
    cannot = _cannot_go(inp, node)
    if cannot is not None:
        result.actions.append(blocked(inp, node, cannot, inp.target_for(node)))
        return True
    no_image = image_not_ready(inp, node)
    if no_image is None:
        # KMM found it: the image must also hold the node's kernel's modules (step/kernel_proof.py).
        proof = kernel_proof(inp, node)
        result.actions.extend(proof.actions)
        if proof.block is None:
            return False
        if proof.proven_missing:
            result.actions.append(blocked(inp, node, proof.block, inp.target_for(node)))
            return True
        no_image = proof.block
    timeout = inp.settings.timeouts.check
    if elapsed >= timeout:
        reason = f"{no_image.words} (after {duration_words(timeout)})"
        block = Block(no_image.kind, reason)
        result.actions.append(blocked(inp, node, block, inp.target_for(node)))
    else:
        result.wake(min(CALL_RETRY_SECONDS, timeout - elapsed))
    return True


def step_checking(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = inp.target_for(node)
    timeout = inp.settings.timeouts.check
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    now = epoch(inp.now)
    if _stops_before_asking(inp, node, result, elapsed):
        return result
    call = node.call(INSPECT)
    if call is None or not call.answered:
        if elapsed >= timeout:
            why = call.error if call is not None and call.error else "no answer"
            reason = f"no fresh agent report within {duration_words(timeout)}: {why}"
            unreachable = Block(BlockKind.AGENT_UNREACHABLE, reason)
            result.actions.append(blocked(inp, node, unreachable, version))
            return result
        if due(call, now, CALL_RETRY_SECONDS):
            ask_report(result, node)
        result.wake(min(CALL_RETRY_SECONDS, timeout - elapsed))
        return result
    assert call.report is not None
    if node.gpu_pods is None:
        if elapsed >= timeout:
            unlisted = Block(BlockKind.PODS_UNKNOWN, "could not list the node's pods")
            result.actions.append(blocked(inp, node, unlisted, version))
        else:
            result.wake(CALL_RETRY_SECONDS)
        return result
    # The preflight blocks whatever the pods: nothing may be unloaded for this target.
    refused = preflight_block(inp, call.report, node)
    unfixable = refused or unfixable_block(inp, call.report, node, clearable=True)
    if unfixable is not None and (refused or not (node.gpu_pods or node.claims)):
        result.actions.append(blocked(inp, node, unfixable, version))
        return result
    result.actions.append(_enter_draining(inp, node, call.report))
    return result


# -- Draining -----------------------------------------------------------------------------


def step_draining(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = inp.target_for(node)
    timeout = inp.settings.timeouts.drain
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    if inp.settings.cordon and node.cordoned_by_us and not node.unschedulable:
        # Recorded before a restart cut the cordon off, or undone by someone: cordon again.
        result.actions.append(PatchNode(node.name, node.resource_version, unschedulable=True))
        return result
    unknown = claims_unknown(node)
    if unknown is not None:
        result.actions.append(blocked(inp, node, unknown, version))
        return result
    if node.gpu_pods is None:
        result.wake(CALL_RETRY_SECONDS)
        return result
    waiting = drain_block(inp, node)
    if waiting is None:
        result.actions.append(
            transition(
                inp, node, Phase.PREPARING, "preparing the node for the unload", version=version
            )
        )
        return result
    drained = drained_pods(inp, node)
    if timeout > 0 and elapsed >= timeout:  # 0: no limit, the node stays cordoned and waits
        result.actions.append(_drain_timed_out(inp, node, waiting))
        return result
    if drained and inp.settings.evict_gpu_pods:
        result.actions.append(EvictPods(node.name, drained))
        result.wake(EVICT_RETRY_SECONDS)
    if pausable_on_node(inp, node):  # the DaemonSet controller deletes them; look again soon
        result.wake(PAUSE_POLL_SECONDS)
    if timeout > 0:
        result.wake(timeout - elapsed)
    return result


def _drain_timed_out(inp: RolloutInput, node: NodeFacts, waiting: Block) -> PatchNode:
    """Blocked, the drain still waiting at its timeout. A declared DaemonSet's pod still on
    the node does not select on the label and never leaves by itself: Blocked until the
    DaemonSet changes, not tried again before (step/pause.py)."""
    version = inp.target_for(node)
    stuck = not_selecting(inp, node)
    if stuck:
        write = blocked(inp, node, not_selecting_block(stuck), version)
        record = {**write.annotations, **not_selecting_record(stuck)}
        return dataclasses.replace(write, annotations=record)
    timeout = duration_words(inp.settings.timeouts.drain)
    reason = f"still on the node after {timeout}: {waiting.words}" + _drain_hint(inp, node)
    return blocked(inp, node, Block(waiting.kind, reason), version)


def _drain_hint(inp: RolloutInput, node: NodeFacts) -> str:
    """Why a drain that timed out may never end by itself."""
    hints = []
    if drained_pods(inp, node) and not inp.settings.evict_gpu_pods:
        hints.append("evictGPUPods is off")
    if pausable_on_node(inp, node):
        hints.append(
            f"a paused pod leaves once its controller deletes it, as the DaemonSet controller "
            f"does when the pod's DaemonSet selects on {names.DRIVER_READY_LABEL}="
            f"{names.DRIVER_READY_VALUE} (docs/gpu-daemons.md)"
        )
    return f" ({'; '.join(hints)})" if hints else ""


# -- Preparing ----------------------------------------------------------------------------


def kmm_write(inp: RolloutInput, node: NodeFacts, changes: str | None, reason: str) -> PatchNode:
    """Record the preparation's changes and make the KMM write, in one write: Loading."""
    version = inp.target_for(node)
    annotations: dict[str, str | None] = {}
    if changes is not None:
        annotations[names.PREPARE_CHANGES] = changes
    if not removing(version):
        annotations[names.DRIVER_IMAGE] = node.target_image or None
    annotations.update(released_write(node))  # a hold let go just before (worker_hold.py)
    return transition(
        inp,
        node,
        Phase.LOADING,
        reason,
        version=version,
        labels=kmm_write_labels(inp, node, version),
        annotations=annotations,
    )


def _what_kmm_does(inp: RolloutInput, node: NodeFacts) -> str:
    version = inp.target_for(node)
    if removing(version):
        return f"KMM unloads {inp.module_driver} ({names.TARGET_LABEL} removed)"
    return f"KMM loads {version}"


def _all_changes(
    inp: RolloutInput,
    node: NodeFacts,
    report: ReportFacts | None,
    new: list[agent_pb.NodeChange],
) -> str | None:
    """prepare-changes after this preparation: recorded + new + what the states imply.

    The states imply changes only where a preparation may have made them (the settings let
    the agent change the node) and the driver is live: with the module not loaded (a node
    taken back to Checking while KMM was between unload and load), unbound functions and
    vanished VFs are the unload's doing, not a preparation's, and nothing is to be restored.
    """
    recorded = decode_changes(node.annotations.get(names.PREPARE_CHANGES))
    vfs_before = decode_vfs(node.annotations.get(names.VFS_BEFORE))  # a bad record fails here
    bound_before = decode_bound(node.annotations.get(names.BOUND_BEFORE))
    implied = []
    may_have_changed = inp.settings.prepare_changes_node
    if report is not None and may_have_changed and report.module_state == MODULE_LIVE:
        implied = reconstructed_changes(vfs_before, report.vfs, bound_before, report.drivers)
    merged = merge_changes(recorded, new, implied)
    if not merged and not recorded:
        return None
    return encode_changes(merged)


def _fresh(call: CallState | None, now: float) -> bool:
    """An answer of this attempt, at most FRESH_REPORT_SECONDS old: the KMM write may be
    decided on it."""
    return (
        call is not None
        and call.answered
        and call.finished_at is not None
        and now - call.finished_at <= FRESH_REPORT_SECONDS
    )


def _ask_prepared(
    inp: RolloutInput, node: NodeFacts, kind: str, call: CallState | None
) -> StepResult:
    """Send (or resend) the preparation's request, or fail the node once it timed out."""
    result = StepResult()
    timeout = inp.settings.timeouts.prepare
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    if elapsed >= timeout:
        if call is not None and call.error:
            why = call.error
        elif call is not None and call.answered:
            why = f"no answer younger than {duration_words(FRESH_REPORT_SECONDS)}"
        else:
            why = "no answer"
        what = "PrepareRequest" if kind == PREPARE else "report request"
        reason = f"no answer to the {what} within {duration_words(timeout)}: {why}"
        result.actions.append(failed(inp, node, reason, inp.target_for(node)))
        return result
    if due(call, epoch(inp.now), CALL_RETRY_SECONDS):
        if kind == PREPARE:
            result.actions.append(
                SendPrepare(
                    node.name,
                    node.attempt,
                    inp.module_driver,
                    allow_unbind=inp.settings.unbind_idle_devices,
                    allow_disable_vfs=inp.settings.disable_idle_vfs,
                    unloaded_with=inp.unloaded_with,
                )
            )
        else:
            ask_report(result, node)
    result.wake(min(CALL_RETRY_SECONDS, timeout - elapsed))
    return result


def _after_prepare(inp: RolloutInput, node: NodeFacts, prepared: PrepareFacts) -> PatchNode:
    """The agent's PrepareResult decides: the KMM write, blocked (nothing changed) or
    failed."""
    version = inp.target_for(node)
    changes = _all_changes(inp, node, prepared.report, list(prepared.changes))
    if prepared.error:
        annotations: dict[str, str | None] = {names.PREPARE_CHANGES: changes} if changes else {}
        reason = f"preparation failed half way: {prepared.error}"
        return failed(inp, node, reason, version, annotations)
    if not prepared.ready:
        named = unfixable_block(inp, prepared.report, node) if prepared.report else None
        block = named or report_block(
            [b.reason for b in prepared.blockers], [b.message for b in prepared.blockers]
        )
        return blocked(inp, node, block or Block(BlockKind.UNKNOWN_STATE, "not ready"), version)
    done = "prepared"
    if changes:
        done += (
            " (devices changed; they stay so once the driver is gone)"
            if removing(version)
            else " (devices changed; restored after the load)"
        )
    return kmm_write(inp, node, changes, f"{done}; {_what_kmm_does(inp, node)}")


def _after_inspect(inp: RolloutInput, node: NodeFacts, report: ReportFacts) -> PatchNode:
    """Without preparation, a fresh report without blockers lets the KMM write go ahead.

    (disableIdleVFs is off here, so the rule clears no VF.)
    """
    version = inp.target_for(node)
    left = unfixable_block(inp, report, node)  # every client blocks now, named
    if left is not None:
        return blocked(inp, node, left, version)
    changes = _all_changes(inp, node, report, [])
    reason = f"nothing holds the devices; {_what_kmm_does(inp, node)}"
    return kmm_write(inp, node, changes, reason)


def step_preparing(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = inp.target_for(node)
    unknown = claims_unknown(node)
    if unknown is not None:
        result.actions.append(blocked(inp, node, unknown, version))
        return result
    if node.gpu_pods is None:
        result.wake(CALL_RETRY_SECONDS)
        return result
    if node.claims or drained_pods(inp, node) or pausable_on_node(inp, node):
        reason = f"back to draining: {drain_words(inp, node)}"
        result.actions.append(transition(inp, node, Phase.DRAINING, reason, version=version))
        return result
    kind = PREPARE if inp.settings.prepare_changes_node else INSPECT
    call = node.call(kind)
    if not _fresh(call, epoch(inp.now)):
        return _ask_prepared(inp, node, kind, call)
    assert call is not None
    try:
        if call.prepare is not None:
            result.actions.append(_after_prepare(inp, node, call.prepare))
        else:
            assert call.report is not None
            result.actions.append(_after_inspect(inp, node, call.report))
    except RecordError as err:
        result.actions.append(failed(inp, node, str(err), version))
    if any(isinstance(a, PatchNode) and a.phase_to is Phase.LOADING for a in result.actions):
        result.actions.extend(probes_done(node))  # after the KMM write, only if it was made
    return result


# -- Loading ------------------------------------------------------------------------------


LOAD_WITHDRAWN = (
    "the KMM write was taken back (nothing of the driver is loaded here; left in place it "
    "would stay an order to KMM, whose loader removes a live xe at every attempt)"
)


def withdrawn_load(inp: RolloutInput, node: NodeFacts, version: str) -> dict[str, str | None]:
    """The labels that take back a load that timed out, or none. A failed load would stay a
    standing order to KMM (its loader restarts for ever, each start a `modprobe -r xe` of
    whatever is live then: an admin's modprobe, an autoloaded in-tree xe). Taking the write
    back is safe only while KMM reports nothing of the Module loaded on the node (no ready
    label): KMM then deletes the loader and unloads nothing. With something loaded, it would
    be an unload: the write stays."""
    if removing(version) or inp.kmm.ready in node.labels:
        return {}
    return {names.TARGET_LABEL: None, inp.kmm.version: None}


def undone_write_words(version: str) -> str:
    """Why a node in Loading whose KMM write someone undid goes back to Checking."""
    if removing(version):
        undone = f"{names.TARGET_LABEL} or KMM's version label was put back while KMM unloaded"
    else:
        undone = f"the KMM write for {version} was taken off while KMM loaded it"
    return (
        f"{undone} (not by gpuctl): writing it again is a new KMM action, so the node is "
        "checked again first (cordon and records kept)"
    )


def step_loading(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """KMM acts on the KMM write: the load (ready labels at the version) or, on the removal
    path, the unload (its ready label gone). A write someone undid is a new KMM action when
    made again: the node goes back to Checking, and the write comes after the checks. Until
    KMM acts, the agent is asked again now and then: devices opened since the check hold KMM's
    worker off the node (worker_hold.py)."""
    result = StepResult()
    version = node.state_version or inp.target_for(node)
    if not written(inp, node, version):
        words = undone_write_words(version)
        result.actions.append(transition(inp, node, Phase.CHECKING, words, version=version))
        return result
    if removing(version):
        done = inp.kmm.ready not in node.labels
        words = f"KMM reports {inp.module_driver} unloaded; verifying with the agent"
        late = f"KMM did not unload {inp.module_driver}"
    else:
        done = kmm_loaded(inp, node, version)
        words = f"KMM reports {version} loaded; verifying with the agent"
        late = f"KMM did not load {version}"
    if done:
        result.actions.append(transition(inp, node, Phase.VERIFYING, words, version=version))
        return result
    holders = opened_since_the_check(inp, node, version)
    if holders:
        result.actions += hold(inp, node, version, holders)
        return result
    timeout = inp.settings.timeouts.load
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    if elapsed >= timeout:
        reason = f"{late} within {duration_words(timeout)}"
        if node.kmm_activity:
            reason += f": {node.kmm_activity}"
        listed = listed_hold_words(inp, node)
        if listed:
            reason += f"; {listed}"
        withdrawn = withdrawn_load(inp, node, version)
        if withdrawn:
            reason += f"; {LOAD_WITHDRAWN}"
        result.actions.append(failed(inp, node, reason, version, labels=withdrawn))
        return result
    result.wake(timeout - elapsed)
    nudge_while_released(result, node, epoch(inp.now))
    ask_again(result, node, epoch(inp.now))
    return result


def step_any_verifying(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Verifying after a reboot (reboots.py) or after the node's KMM write (step/verifying.py)."""
    if names.REBOOTED in node.annotations:
        return step_reverifying(inp, node)
    return step_verifying(inp, node)


STEPS = {
    Phase.CHECKING: step_checking,
    Phase.DRAINING: step_draining,
    Phase.PREPARING: step_preparing,
    Phase.LOADING: step_loading,
    Phase.VERIFYING: step_any_verifying,
}
