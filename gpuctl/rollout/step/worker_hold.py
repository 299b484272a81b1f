"""The gap between the check and KMM's worker: devices opened after it hold KMM's worker off.

The KMM write is decided on an agent answer at most FRESH_REPORT_SECONDS old, but KMM's
worker runs later: KMM reconciles the label, updates the node's NodeModulesConfig, creates a
worker Pod, the kubelet pulls and starts it. A GPU daemon, a host process, or (with `cordon:
false`) a GPU pod can open the device in between; and an unloader, once running, retries its
`modprobe -r` until the first idle moment (the issue "Twelve ways a busy node can still lose
its driver", item 8).

The write cannot be taken back: KMM drops its own worker-pod version label the moment the
version label changes, and adds it again only once the module is unloaded
(node_label_module_version_reconciler.go, verifyLabelAddValidity), so the old config never
returns to the node's NodeModulesConfig and KMM makes the unloader again however often it is
deleted. What can be stopped is the Pod: the chart's worker hold guard
(coordinator/policies/worker_hold_guard.py, a ValidatingAdmissionPolicy) refuses the creation of a
KMM worker Pod on a node its namespace's hold list (names.KMM_WORKER_HOLDS) names. So:

- while a node is in Loading and KMM has not reported the load (or the unload), the rollout
  asks its agent again every LOADING_CHECK_SECONDS;
- an answer that shows the module the check saw still live (not yet the target) and
  something holding it puts the node on hold: Blocked, naming the holder (names.
  KMM_WORKER_HELD; the labels stay as written: KMM's order stands, it just cannot run), the
  node in the hold list, and KMM's worker Pods of the Module there that have not succeeded
  deleted. KMM makes them again, and admission refuses them;
- the Blocked node is checked again like any other; once idle, its KMM write is made afresh
  after the checks, and the hold is let go in that pass (before the write), then KMM is
  nudged (an annotation on its NodeModulesConfig: its retries of the refused Pod may be
  backing off for minutes).

What remains: an unload made in the moment the holder lets go between two answers (the
module was idle then; a client that opens it again later finds no driver), and a holder that
opens the device after KMM's unloader succeeded (there is no module left to hold). On the
srcversion path a config-only change (the same image reloaded) cannot tell the old module
from the new one by what the agent reads, so no node is held there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import Action, DeleteWorkerPods, HoldWorkers, NudgeKmm, PatchNode
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.event_notes import WARNING
from gpuctl.rollout.input.facts import INSPECT, NodeFacts, ReportFacts, RolloutInput
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.step.verifying import module_mismatch
from gpuctl.rollout.step.writes import (
    MODULE_LIVE,
    ask_report,
    due,
    removing,
    transition,
    unfixable_block,
)

# How often a node in Loading is asked whether something opened its devices since the check.
LOADING_CHECK_SECONDS = 2.0
# How soon a held node's worker Pods are looked at again while KMM still has one there.
WORKER_RECHECK_SECONDS = 1.0


def _report_of_the_checked_module(
    inp: RolloutInput, node: NodeFacts, version: str
) -> ReportFacts | None:
    """The latest answer of this Loading step if it shows the module the check saw: live
    and, on the load path, not yet the target (on the removal path: still loaded)."""
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return None
    report = call.report
    if report.module_state != MODULE_LIVE:
        return None
    if removing(version) or module_mismatch(inp, node, report):
        return report
    return None


def opened_since_the_check(inp: RolloutInput, node: NodeFacts, version: str) -> str:
    """What holds the node's devices now that did not at the check, in words ("" when the
    latest answer of this Loading step shows nothing, or not the checked module)."""
    report = _report_of_the_checked_module(inp, node, version)
    if report is None:
        return ""
    block = unfixable_block(inp, report, node)
    return block.words if block is not None else ""


def hold(inp: RolloutInput, node: NodeFacts, version: str, holders: str) -> list[Action]:
    """Blocked with KMM's worker held off the node (cordon, records and labels kept), then
    the hold; the Blocked node's cleanup deletes KMM's workers there."""
    reason = (
        f"opened after the check, before KMM acted: {holders}; KMM's worker is held off the "
        "node until it is checked idle again"
    )
    blocked = transition(
        inp,
        node,
        Phase.BLOCKED,
        reason,
        version=version,
        annotations={
            names.KMM_WORKER_HELD: version,
            names.REASON_KIND: BlockKind.OPENED_AFTER_CHECK.value,
        },
        event_kind=WARNING,
    )
    return [blocked, HoldWorkers(node.name, held=True)]


def ask_again(result: StepResult, node: NodeFacts, now: float) -> None:
    """While KMM has not acted on the write: the agent is asked again when due."""
    if due(node.call(INSPECT), now, LOADING_CHECK_SECONDS):
        ask_report(result, node)
    result.wake(LOADING_CHECK_SECONDS)


def hold_list(nodes: Iterable[str]) -> str:
    """names.KMM_WORKER_HOLDS's value for `nodes` (sorted, space-separated), as the chart's
    worker hold guard reads it (coordinator/policies/worker_hold_guard.py)."""
    return " ".join(sorted(nodes))


def held_in(value: str | None) -> frozenset[str]:
    """The nodes a names.KMM_WORKER_HOLDS value lists."""
    return frozenset((value or "").split())


def held_nodes(nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The nodes KMM's worker is held off: those whose Node carries names.KMM_WORKER_HELD.
    The namespace's hold list is made of these, pass after pass (coordinator/rollout/
    worker_holds.py): a node deleted, re-registered without the annotation, or let go by
    `gpuctl driver abandon` leaves the list with it."""
    return frozenset(
        str(node["metadata"]["name"])
        for node in nodes
        if names.KMM_WORKER_HELD in ((node.get("metadata") or {}).get("annotations") or {})
    )


def listed_hold_words(inp: RolloutInput, node: NodeFacts) -> str:
    """Why KMM makes no worker on a node the hold list still names ("" when it does not)."""
    if node.name not in inp.worker_holds:
        return ""
    trouble = f" ({inp.worker_holds_trouble})" if inp.worker_holds_trouble else ""
    return (
        f"KMM's worker is refused on the node: the namespace's {names.KMM_WORKER_HOLDS} still "
        f"lists it{trouble}"
    )


def held(node: NodeFacts) -> bool:
    """The node's KMM worker is held off (a Blocked node's, names.KMM_WORKER_HELD)."""
    return names.KMM_WORKER_HELD in node.annotations


def cleanup(node: NodeFacts) -> StepResult:
    """A held node (Blocked, or Failed after a reboot, reboots.py) with KMM worker Pods not
    run to the end: the hold made sure of and those Pods deleted again (KMM makes them again
    until admission sees the hold; the pass that holds a node does not see them yet)."""
    result = StepResult()
    stopped = node.phase in (Phase.BLOCKED, Phase.FAILED)
    if not stopped or not held(node) or not node.unfinished_workers:
        return result
    result.actions += [HoldWorkers(node.name, held=True), DeleteWorkerPods(node.name)]
    result.wake(WORKER_RECHECK_SECONDS)
    return result


def released_write(node: NodeFacts) -> dict[str, str | None]:
    """The annotations of a KMM write: the hold dropped (it is let go just before), and the
    mark that makes Loading nudge KMM until it makes its worker."""
    if not held(node):
        return {}
    return {names.KMM_WORKER_HELD: None, names.KMM_WORKER_RELEASED: "true"}


def let_go_first(node: NodeFacts, write_drops_hold: bool) -> list[Action]:
    """Before a write that drops the hold annotation (the KMM write, the node leaving): the
    hold let go. The write's own checks are fresh (a KMM write), or there is nothing left
    for KMM to do on the node for this GPUDriver (it left)."""
    return [HoldWorkers(node.name, held=False)] if held(node) and write_drops_hold else []


def nudge_while_released(result: StepResult, node: NodeFacts, now: float) -> None:
    """In Loading after a hold was let go: KMM nudged until it has made its worker (its
    refused Pod's retries may be backing off for minutes)."""
    released = names.KMM_WORKER_RELEASED in node.annotations
    if (
        released
        and not node.unfinished_workers
        and due(node.call(INSPECT), now, LOADING_CHECK_SECONDS)
    ):
        result.actions.append(NudgeKmm(node.name))


def holds_let_go_first(inp: RolloutInput, actions: Sequence[Action]) -> list[Action]:
    """A write that drops a node's worker hold (its KMM write, or the node leaving) comes
    right after the hold is let go, in the same node's share."""
    nodes = {n.name: n for n in inp.nodes}
    out: list[Action] = []
    for action in actions:
        if isinstance(action, PatchNode) and action.node in nodes:
            drops = names.KMM_WORKER_HELD in action.annotations and (
                action.annotations[names.KMM_WORKER_HELD] is None
            )
            out += let_go_first(nodes[action.node], drops)
        out.append(action)
    return out
