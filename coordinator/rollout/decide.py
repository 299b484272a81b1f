"""The rollout decision for one GPUDriver: a pure function from facts to actions and status.

Per pass, over every targeted node (in name order):

1. Nodes not yet part of this rollout are put in their place: `Skipped` (opted out with
   `gpuctl.dev/rollout=skip`), `Done` (already labelled and loaded at the target), `Loading`
   (labelled at the target by someone else, KMM not done: it is verified like any other),
   or `Pending` (everything else: no state, an older version's Done/Failed/Blocked, a
   Skipped node whose opt-out was removed).
2. Nodes in progress take their next step (steps.py).
3. New nodes start (Pending, or Blocked nodes whose blocker went away) while the rollout is
   neither paused, held after its first node, failed (at its failure budget) nor waiting for
   the Module, and only while the unavailable nodes — in progress, cordoned by anyone, or
   NotReady — stay within maxUnavailable. They start in the order of
   gpuctl.common.rollout_order (the one `gpuctl rollout plan` shows): nodes unavailable
   already (an admin's cordon) first, as they take no new slot, then by name.
4. Blocked nodes are asked now and then whether their blocker went away.

The status (rollout_status.py) and the Events about the GPUDriver come out of the same facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.event_notes import NORMAL, WARNING, EventNote
from coordinator.rollout.actions import Action, PatchNode, RequestReport
from coordinator.rollout.facts import INSPECT, NodeFacts, RolloutInput
from coordinator.rollout.rollout_status import RolloutCounts, rollout_status
from coordinator.rollout.settings import SettingsError, max_unavailable
from coordinator.rollout.steps import (
    STEPS,
    StepResult,
    blocked,
    epoch,
    kmm_loaded,
    transition,
    unfixable_blockers,
)
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.common.rollout_order import is_unavailable, start_order


@dataclass
class Decision:
    actions: list[Action] = field(default_factory=list)
    # status.rollout to write; None removes it (no target version).
    status: dict[str, Any] | None = None
    events: list[EventNote] = field(default_factory=list)
    requeue_after: float | None = None

    def wake(self, seconds: float | None) -> None:
        if seconds is None:
            return
        self.requeue_after = (
            seconds if self.requeue_after is None else min(self.requeue_after, seconds)
        )

    def take(self, step: StepResult) -> None:
        self.actions.extend(step.actions)
        self.wake(step.wake_in)


def _stays(node: NodeFacts, target: str) -> bool:
    """True when the node already has its place in this rollout."""
    phase, current = node.phase, node.state_version == target
    if phase in IN_PROGRESS or (current and phase in (Phase.DONE, Phase.FAILED)):
        return True
    if node.opted_out:
        return phase is Phase.SKIPPED
    return current and phase in (Phase.BLOCKED, Phase.PENDING)


def _placement(inp: RolloutInput, node: NodeFacts, target: str) -> PatchNode | None:
    """The write that puts a node not (yet) in this rollout in its place, if any."""
    if _stays(node, target):
        return None
    if node.opted_out:
        reason = f"opted out with {names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}"
        return transition(inp, node, Phase.SKIPPED, reason, version=target)
    if node.labels.get(inp.kmm.version) == target:
        if kmm_loaded(inp, node, target):
            reason = f"already labelled and loaded at {target} before the rollout reached it"
            return transition(inp, node, Phase.DONE, reason, version=target)
        # Labelled by someone else: KMM acts on it whatever gpuctl does; verify its result.
        reason = f"labelled for {target} before the rollout reached it; waiting for KMM"
        return transition(inp, node, Phase.LOADING, reason, version=target)
    return transition(inp, node, Phase.PENDING, "", version=target)


def _effective_phase(node: NodeFacts, placement: PatchNode | None) -> Phase:
    if placement is not None and placement.phase_to is not None:
        return placement.phase_to
    return node.phase or Phase.PENDING


def _unblocked(inp: RolloutInput, node: NodeFacts) -> bool:
    """A Blocked node's latest recheck shows nothing the rollout cannot clear."""
    if not node.ready or node.claims or node.gpu_pods is None:
        return False
    if node.gpu_pods and not inp.settings.evict_gpu_pods:
        return False
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return False
    return not unfixable_blockers(inp, call.report)


def _recheck(inp: RolloutInput, node: NodeFacts, decision: Decision) -> None:
    """Ask a Blocked node's agent again once the last answer is old enough."""
    call = node.call(INSPECT)
    now = epoch(inp.now)
    every = inp.blocked_recheck_seconds
    if call is None or (call.finished_at is not None and now - call.finished_at >= every):
        decision.actions.append(RequestReport(node.name, node.attempt))
        decision.wake(every)
    elif call.finished_at is not None:
        decision.wake(every - (now - call.finished_at))


def _gate(inp: RolloutInput, counts: RolloutCounts) -> str:
    """Why no new node may start now ("" when nodes may start)."""
    if not inp.module_ready:
        return inp.module_wait_reason or "waiting for the Module"
    if counts.failed >= inp.settings.failure_budget:
        return "failed"
    if inp.settings.paused:
        return "paused"
    if (
        inp.settings.hold_after_first_node
        and inp.resumed_version != inp.target_version
        and counts.updated >= 1
        and counts.updated < counts.total
    ):
        return "held"
    return ""


def _unavailable(nodes: Mapping[str, NodeFacts], phases: Mapping[str, Phase]) -> set[str]:
    return {
        name
        for name, node in nodes.items()
        if is_unavailable(phases[name], unschedulable=node.unschedulable, ready=node.ready)
    }


def decide(inp: RolloutInput) -> Decision:
    """Everything to do for one GPUDriver's rollout now."""
    decision = Decision()
    target = inp.target_version
    if not target:
        return decision
    nodes = {n.name: n for n in sorted(inp.nodes, key=lambda n: n.name)}
    phases: dict[str, Phase] = {}
    for name, node in nodes.items():
        placement = _placement(inp, node, target)
        if placement is not None:
            decision.actions.append(placement)
        phases[name] = _effective_phase(node, placement)
        if placement is None and node.phase in STEPS:
            decision.take(STEPS[node.phase](inp, node))
    counts = RolloutCounts.of(phases, {n: nodes[n].state_version for n in nodes}, target)
    try:
        bound = max_unavailable(inp.settings.max_unavailable, counts.total)
    except SettingsError as err:
        decision.status = rollout_status(inp, phases, counts, str(err), "error")
        return decision
    gate = _gate(inp, counts)
    held_back = _start_nodes(inp, nodes, phases, decision, gate=gate, bound=bound)
    message = _message(gate, counts, bound)
    if held_back and not counts.in_progress:
        message += f"; waiting: already unavailable: {held_back}"
    decision.status = rollout_status(inp, phases, counts, message, gate)
    decision.events.extend(_driver_events(inp, decision.status))
    return decision


def _start_nodes(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    decision: Decision,
    *,
    gate: str,
    bound: int,
) -> str:
    """Start nodes within the bound (unless gated); recheck Blocked ones; repair cordons.

    Returns the unavailable nodes, in words, when the bound kept a node from starting.
    """
    held_back = ""
    target = inp.target_version or ""
    unavailable = _unavailable(nodes, phases)
    touched = {a.node for a in decision.actions if isinstance(a, PatchNode)}
    for name in start_order({name: name in unavailable for name in nodes}):
        node = nodes[name]
        if name in touched:
            continue
        phase = phases[name]
        current = node.state_version == target
        if phase is Phase.BLOCKED and current and not _unblocked(inp, node):
            _recheck(inp, node, decision)
            continue
        if phase is Phase.DONE and current and node.cordoned_by_us:
            decision.actions.append(_release_cordon(node))
            continue
        if gate or phase not in (Phase.PENDING, Phase.BLOCKED):
            continue
        if not node.ready:
            if phase is Phase.PENDING:
                decision.actions.append(blocked(inp, node, "node is NotReady", target))
            continue
        if len(unavailable | {name}) > bound:
            held_back = held_back or _unavailable_words(nodes, phases, unavailable)
            continue
        unavailable.add(name)
        reason = "asking the agent for a fresh report"
        decision.actions.append(transition(inp, node, Phase.CHECKING, reason, version=target))
    return held_back


def _unavailable_words(
    nodes: Mapping[str, NodeFacts], phases: Mapping[str, Phase], unavailable: set[str]
) -> str:
    words = []
    for name in sorted(unavailable)[:10]:
        node = nodes[name]
        why = (
            phases[name].value
            if phases[name] in IN_PROGRESS
            else ("NotReady" if not node.ready else "cordoned")
        )
        words.append(f"{name} ({why})")
    more = len(unavailable) - len(words)
    return ", ".join(words) + (f" and {more} more" if more > 0 else "")


def _release_cordon(node: NodeFacts) -> PatchNode:
    """A Done node still cordoned by us (the Done write was cut short): uncordon it."""
    return PatchNode(
        node.name,
        node.resource_version,
        annotations={names.CORDONED_BY_GPUCTL: None},
        unschedulable=False,
    )


def _message(gate: str, counts: RolloutCounts, bound: int) -> str:
    if counts.total and counts.updated == counts.total:
        return f"all {counts.total} nodes run the target version"
    if gate == "failed":
        return (
            f"paused: {counts.failed} node(s) failed (failure budget reached); "
            "`gpuctl rollout retry NODE` after fixing them"
        )
    if gate == "paused":
        return "paused by spec.rollout.paused; `gpuctl rollout resume` continues"
    if gate == "held":
        return "held after the first node; check it, then `gpuctl rollout resume`"
    if gate:
        return gate
    words = f"{counts.updated}/{counts.total} updated, at most {bound} unavailable at once"
    if counts.blocked:
        words += f"; {counts.blocked} blocked"
    return words


def _driver_events(inp: RolloutInput, status: Mapping[str, Any]) -> list[EventNote]:
    """An Event when the rollout's state changes (held, paused, failed, complete)."""
    before = inp.previous_status
    state = status.get("state")
    if before.get("state") == state and before.get("targetVersion") == status.get("targetVersion"):
        return []
    kind = WARNING if state == "Failed" else NORMAL
    return [EventNote(kind, f"Rollout{state}", f"{status['targetVersion']}: {status['message']}")]
