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

from gpuctl.common import names, timestamps
from gpuctl.common import revisions as rev
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import Action, PatchNode, RestoreRevision
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.event_notes import WARNING, EventNote
from gpuctl.rollout.facts import NodeFacts, RolloutInput
from gpuctl.rollout.gating import rollout_holds
from gpuctl.rollout.history import recorded
from gpuctl.rollout.holds import Hold, HoldKind, RolloutState
from gpuctl.rollout.messages import driver_events, rollout_message
from gpuctl.rollout.node_step import (
    removing,
    written,
)
from gpuctl.rollout.placement import placement
from gpuctl.rollout.prometheus_gate import GATE_RECHECK_SECONDS
from gpuctl.rollout.refused import anothers_step
from gpuctl.rollout.rollout_status import RolloutCounts, rollout_status
from gpuctl.rollout.settings import SettingsError, max_unavailable
from gpuctl.rollout.soak import soak
from gpuctl.rollout.starts import start_nodes
from gpuctl.rollout.steps import STEPS
from gpuctl.rollout.windows import WindowState, window_state, window_status
from gpuctl.rollout.worker_hold import cleanup, let_go_first


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
    gates = rollout_holds(inp, counts, phases, window, soaking)
    if gates.load is not None and gates.load.kind is HoldKind.PROMETHEUS_GATE:
        decision.wake(GATE_RECHECK_SECONDS)
    staying = {name: nodes[name] for name in phases}
    held_back = start_nodes(inp, staying, phases, decision, gates=gates, bound=bound)
    message = rollout_message(inp, gates, counts, bound)
    if held_back and not counts.in_progress:
        message += f"; waiting: already unavailable: {held_back}"
    decision.status = rollout_status(inp, phases, counts, message, gates.load, waits=decision.waits)
    if window is not None:
        decision.status["maintenanceWindow"] = window_status(window)
    decision.events.extend(driver_events(inp, decision.status))
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
