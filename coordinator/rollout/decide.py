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
   A node in a step of another GPUDriver's rollout is left to it (refused.py).
2. A node in a step about another version than its own (the target changed, or the node
   became wanted or unwanted mid-step) goes back to Checking at its version, keeping its
   cordon and records: it is never stranded half way, and takes the new version through
   the same checks. Other nodes in progress take their next step (steps.py).
3. New nodes start (Pending, or Blocked nodes whose blocker went away) only while the
   unavailable nodes — in progress, cordoned by anyone, or NotReady — stay within
   maxUnavailable. A node verified Done (and uncordoned) in this pass frees its slot for a
   start in the same pass, unless a Done can hold the starts (an unreleased
   holdAfterFirstNode, a soak); a start that takes such a slot names the node that frees it
   (`PatchNode.freed_by`): it is made only once that node's Done write succeeded. Loads wait
   while the rollout is paused, held after its first node, failed (at its failure budget) or
   waiting for the Module; removals only while it is paused or failed (the Module's version
   does not matter to an unload, and the drivers controller may hold a Module update until
   such nodes are unloaded). They start in the order of gpuctl.rollout.order (the one
   `gpuctl rollout plan` shows): nodes unavailable already (an admin's cordon) first, as
   they take no new slot, then by name.
4. Blocked nodes are asked now and then whether their blocker went away. One whose devices
   were opened after the check has KMM's worker held off it (worker_hold.py); a write that
   drops that hold (its next KMM write, or the node leaving) lets it go just before.
5. With onNodeFailure: Rollback, a node Failed at the target after its KMM write (its load
   or verification failed) rolls the GPUDriver back to the previous revision in
   status.revisions (RestoreRevision: spec.kernelModule as recorded, and the rollback record
   names.ROLLBACK). While the target is the rollback's, only the nodes it names start, taken
   there through the same steps; then the rollout is Paused until `gpuctl rollout resume`.
   A target that is itself a rollback's result never rolls back again.
6. With maintenanceWindows, no node starts (loads and removals alike) while every window is
   closed; nodes in a step finish it. The status says when the next window opens, and a
   pass is due when a window opens or closes.
7. With gates.prometheus, no node starts (loads and removals alike) unless its query's
   answer (gathered by the controller: prometheus_gate.py) was an empty result; a gate that
   cannot be evaluated holds, with why. The rollout is Held meanwhile. A start needs an
   answer no older than the gate's maxAnswerAge (by default one asked for that start): with
   an older one the node waits and the decision asks for a fresh answer (`ask_gate`).
8. With soakSeconds, the node(s) verified first at the target (every one, with soakEachBatch)
   are watched that long before the next node starts (soak.py): one that degrades fails,
   and rolls back under Rollback.

Every rollout-wide reason to start nothing is a typed Hold (gpuctl.rollout.holds): its kind
gives the state, its words the message.

The status (rollout_status.py) and the Events about the GPUDriver come out of the same facts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.event_notes import NORMAL, WARNING, EventNote
from coordinator.rollout.actions import Action, PatchNode, RequestReport, RestoreRevision
from coordinator.rollout.facts import INSPECT, NodeFacts, RolloutInput
from coordinator.rollout.history import recorded
from coordinator.rollout.node_step import (
    NOT_READY,
    StepResult,
    blocked,
    claims_unknown,
    drain_block,
    epoch,
    foreign_target,
    removing,
    transition,
    unfixable_block,
    written,
)
from coordinator.rollout.placement import placement
from coordinator.rollout.prometheus_gate import GATE_RECHECK_SECONDS
from coordinator.rollout.refused import anothers_step
from coordinator.rollout.rollout_status import RolloutCounts, rollout_status
from coordinator.rollout.settings import SettingsError, max_unavailable
from coordinator.rollout.soak import soak
from coordinator.rollout.steps import STEPS
from coordinator.rollout.windows import WindowState, window_state, window_status, window_words
from coordinator.rollout.worker_hold import cleanup, let_go_first
from gpuctl.common import names, timestamps
from gpuctl.common import revisions as rev
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.gates import GateFacts, rollout_gate
from gpuctl.rollout.holds import Block, Hold, HoldKind, RolloutState
from gpuctl.rollout.order import is_unavailable, start_order


@dataclass
class Decision:
    actions: list[Action] = field(default_factory=list)
    # status.rollout to write; None removes it (nothing to roll or remove).
    status: dict[str, Any] | None = None
    events: list[EventNote] = field(default_factory=list)
    requeue_after: float | None = None
    # status.revisions to write (None: unchanged).
    revisions: list[dict[str, Any]] | None = None
    # The rollback to make (onNodeFailure: Rollback), if any.
    rollback: RestoreRevision | None = None
    # A node would start but for the Prometheus gate's answer being older than the gate
    # allows: ask it afresh and decide again before acting.
    ask_gate: bool = False

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
    if not node.ready or node.claims or node.gpu_pods is None or claims_unknown(node):
        return False
    if not removing(inp.target_for(node)) and foreign_target(inp, node):
        return False
    if node.gpu_pods and not inp.settings.evict_gpu_pods:
        return False
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return False
    return unfixable_block(inp, call.report) is None


def _blocker(inp: RolloutInput, node: NodeFacts) -> Block | None:
    """What keeps a Blocked node blocked, from this pass's facts (None when they do not say)."""
    if not node.ready:
        return NOT_READY
    unknown = claims_unknown(node)
    if unknown is not None:
        return unknown
    foreign = None if removing(inp.target_for(node)) else foreign_target(inp, node)
    if foreign is not None:
        return foreign
    waiting = drain_block(node)
    if waiting is not None:
        return Block(waiting.kind, f"waiting for {waiting.words}")
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return None
    return unfixable_block(inp, call.report)


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
    """Why no new node may start now, per path (None when nodes may start); `only`: nodes
    the load gate lets through (those a rollback takes back)."""

    load: Hold | None
    removal: Hold | None
    only: frozenset[str] = frozenset()

    def of(self, version: str, node: str = "") -> Hold | None:
        if removing(version):
            return self.removal
        return None if node in self.only else self.load


def _rollback_active(inp: RolloutInput) -> bool:
    """The target is a rollback's, and `gpuctl rollout resume` has not released it."""
    to = inp.rollback.get("to")
    return bool(to) and to == inp.target_version and inp.resumed_version != to


def _rollback_gates(inp: RolloutInput, phases: Mapping[str, Phase]) -> _Gates:
    """Only the rollback's nodes start; rolling back while one of them still moves."""
    nodes = frozenset(str(n) for n in inp.rollback.get("nodes") or [])
    moving = any(phases.get(n) in (Phase.PENDING, *IN_PROGRESS) for n in nodes)
    kind = HoldKind.ROLLING_BACK if moving else HoldKind.ROLLED_BACK
    return _Gates(Hold(kind, _rollback_words(kind, inp.rollback)), None, nodes)


def _time_and_health_gate(inp: RolloutInput, window: WindowState | None) -> Hold | None:
    """Why no node (load or removal) may start now for the time or the fleet's health."""
    if window is not None and not window.open:
        return Hold(HoldKind.OUTSIDE_WINDOWS, window_words(window), window.opens_at)
    if inp.gate is not None and not inp.gate.passed:
        return Hold(HoldKind.PROMETHEUS_GATE, f"held by the gate: {inp.gate.words}")
    return None


def _gate_answer_fresh(inp: RolloutInput) -> bool:
    """A start may rest on the Prometheus gate's answer: there is no gate, or its answer is
    no older than the gate's maxAnswerAge (asked after `now`, in the same pass, counts as
    age 0)."""
    gate = inp.settings.prometheus_gate
    if gate is None:
        return True
    if inp.gate is None:
        return False
    return (inp.now - inp.gate.asked_at).total_seconds() <= gate.max_answer_age


def _gates(
    inp: RolloutInput,
    counts: RolloutCounts,
    phases: Mapping[str, Phase] | None = None,
    window: WindowState | None = None,
    soaking: str = "",
) -> _Gates:
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
    if gate is not None and gate.kind in (HoldKind.FAILURE_BUDGET, HoldKind.PAUSED):
        return _Gates(gate, gate)
    held = _time_and_health_gate(inp, window)
    if held is not None and gate is not None:
        # Held after the first node: loads wait for a person first, whatever the time or
        # the gate say (the status names what a person must do); removals for the hold.
        return _Gates(gate, held)
    if held is not None:
        return _Gates(held, held)
    if not inp.target_version:
        return _Gates(None, None)
    if not inp.module_ready:
        waiting = inp.module_wait_reason or "waiting for the Module"
        return _Gates(Hold(HoldKind.MODULE_NOT_READY, waiting), None)
    return _load_gates(inp, gate, phases or {}, soaking)


def _load_gates(
    inp: RolloutInput, gate: Hold | None, phases: Mapping[str, Phase], soaking: str
) -> _Gates:
    """The gates of loads alone, once the Module asks for the target: a soak, a rollback,
    the hold after the first node."""
    if soaking:
        words = f"soaking before the next node starts: {soaking}"
        return _Gates(Hold(HoldKind.SOAKING, words), None)
    if _rollback_active(inp):
        return _rollback_gates(inp, phases)
    return _Gates(gate, None)


def _done_frees_in_pass(inp: RolloutInput) -> bool:
    """Whether a node verified Done in this pass may free its slot for a start in the same
    pass: not while a Done can itself hold the starts (an unreleased holdAfterFirstNode, a
    soak), as those gates are judged on the nodes before this pass's writes."""
    held = inp.settings.hold_after_first_node and inp.resumed_version != inp.target_version
    return not held and not inp.settings.soak_seconds


def _unavailable_after(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    actions: Sequence[Action],
    *,
    count_done: bool = True,
) -> set[str]:
    """The unavailable nodes, counting this pass's Done writes (and their uncordon) as made
    where `count_done` and _done_frees_in_pass allow; every other write as not made yet."""
    frees = count_done and _done_frees_in_pass(inp)
    done = {
        a.node: a
        for a in actions
        if frees and isinstance(a, PatchNode) and a.phase_to is Phase.DONE
    }
    unavailable = set()
    for name, node in nodes.items():
        phase, unschedulable = phases[name], node.unschedulable
        write = done.get(name)
        if write is not None:
            phase = Phase.DONE
            unschedulable = unschedulable if write.unschedulable is None else write.unschedulable
        if is_unavailable(phase, unschedulable=unschedulable, ready=node.ready):
            unavailable.add(name)
    return unavailable


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
    decision = _decide(inp)
    decision.actions = _holds_let_go_first(inp, decision.actions)
    return decision


def _holds_let_go_first(inp: RolloutInput, actions: Sequence[Action]) -> list[Action]:
    """A write that drops a node's worker hold (its KMM write, or the node leaving) comes
    right after the hold is let go (worker_hold.py), in the same node's share."""
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


def _decide(inp: RolloutInput) -> Decision:
    decision = Decision()
    nodes = {n.name: n for n in sorted(inp.nodes, key=lambda n: n.name)}
    phases: dict[str, Phase] = {}
    versions: dict[str, str] = {}
    targets: dict[str, str] = {}
    for name, node in nodes.items():
        if anothers_step(node, inp.driver_name):
            continue  # that GPUDriver finishes its step first (refused.py)
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
        if place is None and node.phase is Phase.BLOCKED:
            decision.take(cleanup(node))  # a held node's KMM worker Pods
    if not phases and not inp.target_version:
        return decision
    counts = RolloutCounts.of(phases, versions, targets)
    try:
        bound = max_unavailable(inp.settings.max_unavailable, counts.total + counts.removing)
    except SettingsError as err:
        refused = Hold(HoldKind.REFUSED, str(err))
        decision.status = rollout_status(inp, phases, counts, str(err), refused)
        return decision
    window = _window(inp, decision)
    _first_batch_soaks_only(inp, nodes, decision)
    soaking = _soak(inp, nodes, phases, decision)
    gates = _gates(inp, counts, phases, window, soaking)
    if gates.load is not None and gates.load.kind is HoldKind.PROMETHEUS_GATE:
        decision.wake(GATE_RECHECK_SECONDS)
    staying = {name: nodes[name] for name in phases}
    held_back = _start_nodes(inp, staying, phases, decision, gates=gates, bound=bound)
    message = _message(inp, gates, counts, bound)
    if held_back and not counts.in_progress:
        message += f"; waiting: already unavailable: {held_back}"
    decision.status = rollout_status(inp, phases, counts, message, gates.load)
    if window is not None:
        decision.status["maintenanceWindow"] = window_status(window)
    decision.events.extend(_driver_events(inp, decision.status))
    _history(inp, counts, decision)
    decision.rollback = _rollback(inp, nodes, phases, versions)
    return decision


def _window(inp: RolloutInput, decision: Decision) -> WindowState | None:
    """The maintenance windows now (None without any); a pass is due when one opens or
    closes."""
    if not inp.settings.maintenance_windows:
        return None
    state = window_state(inp.settings.maintenance_windows, inp.now)
    change = state.closes_at if state.open else state.opens_at
    if change is not None:
        decision.wake(max(0.05, (change - inp.now).total_seconds()))
    return state


def _first_batch_soaks_only(
    inp: RolloutInput, nodes: Mapping[str, NodeFacts], decision: Decision
) -> None:
    """Without soakEachBatch, only the first node(s) verified at the target keep the soak's
    baseline their Done write records: not when a node is Done at the target already."""
    target = inp.target_version
    if not inp.settings.soak_seconds or inp.settings.soak_each_batch or not target:
        return
    if not any(n.phase is Phase.DONE and n.state_version == target for n in nodes.values()):
        return
    for index, action in enumerate(decision.actions):
        if isinstance(action, PatchNode) and action.annotations.get(names.SOAK_BASELINE):
            annotations = {**action.annotations, names.SOAK_BASELINE: None}
            decision.actions[index] = dataclasses.replace(action, annotations=annotations)


def _soak(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    decision: Decision,
) -> str:
    """The soak of the nodes verified at the target (soak.py); the soaking ones in words."""
    if not inp.settings.soak_seconds or not inp.target_version:
        return ""
    touched = {a.node for a in decision.actions if isinstance(a, PatchNode)}
    done = [
        node
        for name, node in nodes.items()
        if name not in touched
        and phases.get(name) is Phase.DONE
        and node.phase is Phase.DONE
        and node.state_version == inp.target_version
    ]
    result = soak(inp, done)
    decision.actions.extend(result.actions)
    decision.wake(result.wake_in)
    return ", ".join(result.soaking)


def _history(inp: RolloutInput, counts: RolloutCounts, decision: Decision) -> None:
    """status.revisions with this pass's target recorded."""
    if not inp.target_version or decision.status is None:
        return
    history = recorded(
        inp.revisions,
        version=inp.target_version,
        kernel_module=inp.kernel_module,
        updated=counts.updated,
        complete=decision.status["state"] == RolloutState.COMPLETE,
        started=decision.status["startedAt"],
        now=timestamps.format_seconds(inp.now),
    )
    if history != rev.ordered(inp.revisions):
        decision.revisions = history


def _rollback(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    versions: Mapping[str, str],
) -> RestoreRevision | None:
    """onNodeFailure: Rollback: back to the previous revision once a node's load or
    verification failed at the target (it is Failed there after its KMM write)."""
    target = inp.target_version
    if not inp.settings.rolls_back or not target or inp.rollback.get("to") == target:
        return None
    failed = sorted(
        name
        for name, phase in phases.items()
        if phase is Phase.FAILED and versions[name] == target and written(inp, nodes[name], target)
    )
    if not failed:
        return None
    try:
        entry = rev.previous(inp.revisions, target)
        rev.restorable(entry)
    except rev.RevisionError:
        return None  # nothing to go back to: the failure budget pauses, as with Pause
    reasons = "; ".join(f"{name}: {nodes[name].reason}" for name in failed)
    to = str(entry[rev.VERSION])
    note = rev.rollback_note(
        from_version=target,
        to_version=to,
        revision=int(entry[rev.REVISION]),
        nodes=failed,
        reason=reasons,
    )
    words = (
        f"{target} failed on {', '.join(failed)} ({reasons}): rolling back to revision "
        f"{entry[rev.REVISION]} ({to}); the node(s) go back through the same checks, then the "
        "rollout pauses"
    )
    return RestoreRevision(entry, note, EventNote(WARNING, "RollingBack", words))


class _Slots:
    """The slots starts take: first those free before this pass's writes, then each one a
    Done write of the pass frees, lent to one start that waits for that write."""

    def __init__(self, bound: int, before: set[str], after_done: set[str]) -> None:
        """`before`: the unavailable nodes before this pass's writes; `after_done`: as its
        Done writes leave them."""
        self._free_before = bound - len(before)
        self._freeing = sorted(before - after_done, reverse=True)

    def take(self) -> str | None:
        """ "" for a slot free before the pass, else the node whose Done frees the slot taken;
        None when there is none."""
        if self._free_before > 0:
            self._free_before -= 1
            return ""
        return self._freeing.pop() if self._freeing else None


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
    unavailable = _unavailable_after(inp, nodes, phases, decision.actions)
    before = _unavailable_after(inp, nodes, phases, decision.actions, count_done=False)
    slots = _Slots(bound, before, unavailable)
    touched = {a.node for a in decision.actions if isinstance(a, PatchNode)}
    for name in start_order({name: name in unavailable for name in nodes}):
        node = nodes[name]
        if name in touched:
            continue
        phase = phases[name]
        version = inp.target_for(node)
        current = node.state_version == version
        if phase is Phase.BLOCKED and current and not _unblocked(inp, node):
            block = _blocker(inp, node)
            if block is not None and block.words.removeprefix("waiting for ") not in node.reason:
                # Still blocked, by something else now: the status says what.
                decision.actions.append(blocked(inp, node, block, version))
            else:
                _recheck(inp, node, decision)
            continue
        if phase is Phase.DONE and current and node.cordoned_by_us:
            decision.actions.append(_release_cordon(node))
            continue
        if gates.of(version, name) is not None or phase not in (Phase.PENDING, Phase.BLOCKED):
            continue
        if not node.ready:
            if phase is Phase.PENDING:
                decision.actions.append(blocked(inp, node, NOT_READY, version))
            continue
        if len(unavailable) + (name not in unavailable) > bound:
            held_back = held_back or _unavailable_words(nodes, phases, unavailable)
            continue
        if not _gate_answer_fresh(inp):
            decision.ask_gate = True  # the controller asks afresh and decides again
            continue
        freed_by = "" if name in unavailable else slots.take()
        if freed_by is None:
            continue  # cannot be: the bound above counts the freed slots
        unavailable.add(name)
        reason = "asking the agent for a fresh report"
        start = transition(inp, node, Phase.CHECKING, reason, version=version)
        decision.actions.append(dataclasses.replace(start, freed_by=freed_by))
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


def _message(
    inp: RolloutInput,
    gates: _Gates,
    counts: RolloutCounts,
    bound: int,
) -> str:
    target = inp.target_version or names.REMOVAL_VERSION
    hold = gates.load
    if hold is not None and hold.kind in (HoldKind.FAILURE_BUDGET, HoldKind.PAUSED):
        return f"{target}: {hold.words}"
    if not inp.target_version:
        words = f"unloading the driver from {counts.removing} node(s), at most {bound} at once"
        return f"{words}; {hold.words}" if hold is not None else words
    return _progress_words(target, hold, counts, bound, inp.rollback)


def _rollback_words(kind: HoldKind, rollback: Mapping[str, Any]) -> str:
    nodes = ", ".join(str(n) for n in rollback.get("nodes") or [])
    words = (
        f"rolled back from {rollback.get('from')} to revision {rollback.get('revision')} "
        f"({rollback.get('to')}) after a failure: {rollback.get('reason')}"
    )
    if kind is HoldKind.ROLLING_BACK:
        return f"{words}; taking {nodes} back through the same checks"
    return (
        f"paused: {words}; {nodes} verified back; `gpuctl rollout resume` continues at "
        f"{rollback.get('to')}"
    )


def _progress_words(
    target: str,
    hold: Hold | None,
    counts: RolloutCounts,
    bound: int,
    rollback: Mapping[str, Any],
) -> str:
    removals = f"; unloading the driver from {counts.removing} node(s)" if counts.removing else ""
    if not counts.total and not counts.removing:
        return f"no node is wanted for {target}"
    rolled_back = (HoldKind.ROLLING_BACK, HoldKind.ROLLED_BACK)
    if counts.total and counts.updated == counts.total and not counts.removing:
        if hold is not None and hold.kind in rolled_back:
            return _rollback_words(HoldKind.ROLLED_BACK, rollback)
        return f"all {counts.total} nodes run {target}"
    if hold is not None:
        words = hold.words
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
    kind = WARNING if state == RolloutState.FAILED else NORMAL
    return [EventNote(kind, f"Rollout{state}", f"{status['targetVersion']}: {status['message']}")]
