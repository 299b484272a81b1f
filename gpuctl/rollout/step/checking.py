"""The Checking step (pure): a fresh agent report, the node's pods and claims, then into
Draining.

A node starts its step here. The agent is asked for a report in this step's attempt; a node
whose agent does not answer within the check timeout, whose pods cannot be listed, or whose
target the preflight refuses is Blocked. Otherwise one write cordons it, pauses its GPU daemons
(pause.py) and records what it looked like before anything changes (the pass records), and the
node is Draining. The table of every phase's handler is phases.py.
"""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.input.facts import INSPECT, NodeFacts, ReportFacts, RolloutInput
from gpuctl.rollout.input.records import encode_bound, encode_vfs
from gpuctl.rollout.reasons import Block, BlockKind
from gpuctl.rollout.step.kernel_proof import kernel_proof
from gpuctl.rollout.step.pause import pause_write
from gpuctl.rollout.step.writes import (
    CALL_RETRY_SECONDS,
    MODULE_LIVE,
    NOT_READY,
    ask_report,
    blocked,
    claims_unknown,
    cordon,
    drain_words,
    due,
    duration_words,
    epoch,
    foreign_target,
    image_not_ready,
    judged_clients,
    preflight_block,
    removing,
    step_elapsed,
    transition,
    unfixable_block,
)


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
    """Cordon, pause the node's GPU daemons (gpuctl/rollout/step/pause.py) and record the pass, in
    one write."""
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
    hold the node's kernel's modules (gpuctl/rollout/step/kernel_proof.py), which waits (KMM may
    still be pulling it, the probe running) up to the check's timeout, then is Blocked: nothing is
    unloaded.
    An image proven to lack them is Blocked at once."""
    cannot = _cannot_go(inp, node)
    if cannot is not None:
        result.actions.append(blocked(inp, node, cannot, inp.target_for(node)))
        return True
    no_image = image_not_ready(inp, node)
    if no_image is None:
        # KMM found it: the image must also hold the node's kernel's modules
        # (gpuctl/rollout/step/kernel_proof.py).
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
