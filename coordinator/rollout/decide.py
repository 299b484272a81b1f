"""The rollout decision for one GPUDriver: a pure function from facts to actions and status.

The nodes it considers are those the GPUDriver wants (gpuctl.common.targeting), those
carrying names.TARGET_LABEL=<driver>, and those with rollout state of this GPUDriver. Each
node's version is the target (the Module's KMM version) when wanted, else
names.REMOVAL_VERSION: the removal path takes the driver off it through the same checks.

Per pass, over those nodes (in name order):

1. Nodes not yet in their place are put there: `Skipped` (opted out with
   `gpuctl.dev/rollout=skip`), `Done` (targeted and loaded at the target already),
   `Loading` (targeted and labelled at the target by someone else, KMM not done: verified
   like any other), or `Pending` (everything else: no state, an older version's
   Done/Failed/Blocked, a Skipped node whose opt-out was removed, a node labelled at the
   target without names.TARGET_LABEL, which KMM does not load, a node to unload). A node
   no longer wanted on which nothing was loaded for this GPUDriver just leaves the rollout.
2. A node in a step about another version than its own (the target changed, or the node
   became wanted or unwanted mid-step) goes back to Checking at its version, keeping its
   cordon and records: it is never stranded half way, and takes the new version through
   the same checks. Other nodes in progress take their next step (steps.py).
3. New nodes start (Pending, or Blocked nodes whose blocker went away) only while the
   unavailable nodes — in progress, cordoned by anyone, or NotReady — stay within
   maxUnavailable. Loads wait while the rollout is paused, held after its first node,
   failed (at its failure budget) or waiting for the Module; removals only while it is
   paused or failed (the Module's version does not matter to an unload, and the drivers
   controller may hold a Module update until such nodes are unloaded). They start in the
   order of gpuctl.common.rollout_order (the one `gpuctl rollout plan` shows): nodes
   unavailable already (an admin's cordon) first, as they take no new slot, then by name.
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
from coordinator.rollout.node_step import (
    StepResult,
    blocked,
    claims_unknown_words,
    drain_words,
    epoch,
    foreign_target,
    removing,
    transition,
    unfixable_blockers,
)
from coordinator.rollout.placement import placement
from coordinator.rollout.rollout_status import RolloutCounts, rollout_status
from coordinator.rollout.settings import SettingsError, max_unavailable
from coordinator.rollout.steps import STEPS
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.common.rollout_gates import FAILED, PAUSED, GateFacts, rollout_gate
from gpuctl.common.rollout_order import is_unavailable, start_order


@dataclass
class Decision:
    actions: list[Action] = field(default_factory=list)
    # status.rollout to write; None removes it (nothing to roll or remove).
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


# -- one pass -----------------------------------------------------------------------------


def _unblocked(inp: RolloutInput, node: NodeFacts) -> bool:
    """A Blocked node's latest recheck shows nothing the rollout cannot clear."""
    if not node.ready or node.claims or node.gpu_pods is None or claims_unknown_words(node):
        return False
    if not removing(inp.target_for(node)) and foreign_target(inp, node):
        return False
    if node.gpu_pods and not inp.settings.evict_gpu_pods:
        return False
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return False
    return not unfixable_blockers(inp, call.report)


def _blocker_words(inp: RolloutInput, node: NodeFacts) -> str:
    """What keeps a Blocked node blocked, from this pass's facts ("" when they do not say)."""
    if not node.ready:
        return "node is NotReady"
    unknown = claims_unknown_words(node)
    if unknown:
        return unknown
    foreign = "" if removing(inp.target_for(node)) else foreign_target(inp, node)
    if foreign:
        return foreign
    waiting = drain_words(node)
    if waiting:
        return f"waiting for {waiting}"
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return ""
    return "; ".join(unfixable_blockers(inp, call.report))


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


@dataclass(frozen=True)
class _Gates:
    """Why no new node may start now, per path ("" when nodes may start)."""

    load: str
    removal: str

    def of(self, version: str) -> str:
        return self.removal if removing(version) else self.load


def _gates(inp: RolloutInput, counts: RolloutCounts) -> _Gates:
    gate = rollout_gate(
        GateFacts(
            failed=counts.failed,
            failure_budget=inp.settings.failure_budget,
            paused=inp.settings.paused,
            hold_after_first_node=inp.settings.hold_after_first_node,
            target_version=inp.target_version or "",
            resumed_version=inp.resumed_version or "",
            updated=counts.updated,
            total=counts.total,
        )
    )
    if gate in (FAILED, PAUSED):
        return _Gates(gate, gate)
    if not inp.target_version:
        return _Gates("", "")
    if not inp.module_ready:
        return _Gates(inp.module_wait_reason or "waiting for the Module", "")
    return _Gates(gate, "")


def _unavailable(nodes: Mapping[str, NodeFacts], phases: Mapping[str, Phase]) -> set[str]:
    return {
        name
        for name, node in nodes.items()
        if is_unavailable(phases[name], unschedulable=node.unschedulable, ready=node.ready)
    }


def _after(node: NodeFacts, write: PatchNode | None) -> tuple[Phase | None, str]:
    """The node's phase and version once `write` is made (phase None: it left)."""
    if write is None:
        return node.phase or Phase.PENDING, node.state_version
    version = write.annotations.get(names.STATE_VERSION) or node.state_version
    if write.labels.get(names.STATE_LABEL, "") is None:
        return None, version
    return write.phase_to or node.phase or Phase.PENDING, version


def decide(inp: RolloutInput) -> Decision:
    """Everything to do for one GPUDriver's rollout now."""
    decision = Decision()
    nodes = {n.name: n for n in sorted(inp.nodes, key=lambda n: n.name)}
    phases: dict[str, Phase] = {}
    versions: dict[str, str] = {}
    targets: dict[str, str] = {}
    for name, node in nodes.items():
        place = placement(inp, node)
        if place is None and node.phase is None and removing(inp.target_for(node)):
            continue  # neither wanted nor loaded for this GPUDriver: not in its rollout
        if place is not None:
            decision.actions.append(place)
        phase, version = _after(node, place)
        if phase is None:
            continue  # it left the rollout
        phases[name], versions[name], targets[name] = phase, version, inp.target_for(node)
        if place is None and node.phase in STEPS:
            decision.take(STEPS[node.phase](inp, node))
    if not phases and not inp.target_version:
        return decision
    counts = RolloutCounts.of(phases, versions, targets)
    try:
        bound = max_unavailable(inp.settings.max_unavailable, counts.total + counts.removing)
    except SettingsError as err:
        decision.status = rollout_status(inp, phases, counts, str(err), "error")
        return decision
    gates = _gates(inp, counts)
    staying = {name: nodes[name] for name in phases}
    held_back = _start_nodes(inp, staying, phases, decision, gates=gates, bound=bound)
    message = _message(inp, gates, counts, bound)
    if held_back and not counts.in_progress:
        message += f"; waiting: already unavailable: {held_back}"
    decision.status = rollout_status(inp, phases, counts, message, gates.load)
    decision.events.extend(_driver_events(inp, decision.status))
    return decision


def _start_nodes(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    decision: Decision,
    *,
    gates: _Gates,
    bound: int,
) -> str:
    """Start nodes within the bound (unless gated); recheck Blocked ones; repair cordons.

    Returns the unavailable nodes, in words, when the bound kept a node from starting.
    """
    held_back = ""
    unavailable = _unavailable(nodes, phases)
    touched = {a.node for a in decision.actions if isinstance(a, PatchNode)}
    for name in start_order({name: name in unavailable for name in nodes}):
        node = nodes[name]
        if name in touched:
            continue
        phase = phases[name]
        version = inp.target_for(node)
        current = node.state_version == version
        if phase is Phase.BLOCKED and current and not _unblocked(inp, node):
            words = _blocker_words(inp, node)
            if words and words.removeprefix("waiting for ") not in node.reason:
                # Still blocked, by something else now: the status says what.
                decision.actions.append(blocked(inp, node, words, version))
            else:
                _recheck(inp, node, decision)
            continue
        if phase is Phase.DONE and current and node.cordoned_by_us:
            decision.actions.append(_release_cordon(node))
            continue
        if gates.of(version) or phase not in (Phase.PENDING, Phase.BLOCKED):
            continue
        if not node.ready:
            if phase is Phase.PENDING:
                decision.actions.append(blocked(inp, node, "node is NotReady", version))
            continue
        if len(unavailable | {name}) > bound:
            held_back = held_back or _unavailable_words(nodes, phases, unavailable)
            continue
        unavailable.add(name)
        reason = "asking the agent for a fresh report"
        decision.actions.append(transition(inp, node, Phase.CHECKING, reason, version=version))
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


def _message(inp: RolloutInput, gates: _Gates, counts: RolloutCounts, bound: int) -> str:
    target = inp.target_version or names.REMOVAL_VERSION
    gate = gates.load
    if gate == "failed":
        return (
            f"{target}: paused: {counts.failed} node(s) failed (failure budget reached); "
            "`gpuctl rollout retry NODE` after fixing them"
        )
    if gate == "paused":
        return f"{target}: paused by spec.rollout.paused; `gpuctl rollout resume` continues"
    if not inp.target_version:
        return f"unloading the driver from {counts.removing} node(s), at most {bound} at once"
    return _progress_words(target, gate, counts, bound)


def _progress_words(target: str, gate: str, counts: RolloutCounts, bound: int) -> str:
    removals = f"; unloading the driver from {counts.removing} node(s)" if counts.removing else ""
    if not counts.total and not counts.removing:
        return f"no node is wanted for {target}"
    if counts.total and counts.updated == counts.total and not counts.removing:
        return f"all {counts.total} nodes run {target}"
    if gate == "held":
        words = f"held after the first node of {target}; check it, then `gpuctl rollout resume`"
    elif gate:
        words = gate
    else:
        words = f"{counts.updated}/{counts.total} at {target}, at most {bound} unavailable at once"
        if counts.blocked:
            words += f"; {counts.blocked} blocked"
    return words + removals


def _driver_events(inp: RolloutInput, status: Mapping[str, Any]) -> list[EventNote]:
    """An Event when the rollout's state changes (held, paused, failed, complete)."""
    before = inp.previous_status
    state = status.get("state")
    if before.get("state") == state and before.get("targetVersion") == status.get("targetVersion"):
        return []
    kind = WARNING if state == "Failed" else NORMAL
    return [EventNote(kind, f"Rollout{state}", f"{status['targetVersion']}: {status['message']}")]
