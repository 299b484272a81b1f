"""The Preparing step (pure): the agent prepares the node, or a fresh report shows nothing
holds the devices; then the KMM write, into Loading.

The KMM write (`kmm_write`) is decided only on an agent answer requested in this step's
attempt and at most FRESH_REPORT_SECONDS old, with the GPU pods and claims read for this pass;
a node with pods or claims back goes back to Draining. The table of every phase's handler is
phases.py.
"""

from __future__ import annotations

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode, SendPrepare
from gpuctl.rollout.decision import StepResult
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
    encode_changes,
    merge_changes,
    reconstructed_changes,
)
from gpuctl.rollout.reasons import Block, BlockKind
from gpuctl.rollout.step.kernel_proof import probes_done
from gpuctl.rollout.step.pause import drained_pods, pausable_on_node
from gpuctl.rollout.step.worker_hold import released_write
from gpuctl.rollout.step.writes import (
    CALL_RETRY_SECONDS,
    FRESH_REPORT_SECONDS,
    MODULE_LIVE,
    ask_report,
    blocked,
    claims_unknown,
    drain_words,
    due,
    duration_words,
    epoch,
    failed,
    kmm_write_labels,
    removing,
    report_block,
    step_elapsed,
    transition,
    unfixable_block,
)


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
