"""The rollout decision for one GPUDriver: a pure function from facts to actions and status.

One pass, in this order, over the nodes the pass considers (input/build.py): nodes not yet
in their place are put there (place/placement.py: a node Done at an older version is Pending
without a write, placement.waits_unwritten); a node in a step about another version than its
own goes back to Checking at its version, the others in a step take their next step
(step/phases.py, step/verifying.py); then, unless something holds the whole rollout
(fleet/pass_holds.py: the failure budget, a pause, the hold after the first node, the windows, the
Prometheus gate, the Module, a soak, a rollback), new nodes start within maxUnavailable in the
shared order (start/starts.py), and Blocked ones are asked again. A node Failed at the target after
its KMM write rolls the GPUDriver back under onNodeFailure: Rollback. What each rule is and why is
in docs/rollout.md ("What happens to each node" and the sections after it); the status
(report/status.py) and Events (report/messages.py) come out of the same facts.

The coordinator acts on the Decision (coordinator/rollout/act.py); `gpuctl rollout plan`
renders it (first_moves.py). One decision, two callers.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence

from gpuctl.common import names, timestamps
from gpuctl.common.names import Phase
from gpuctl.gpudriver import revisions as rev
from gpuctl.rollout.actions import Action, PatchNode, RestoreRevision
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.event_notes import WARNING, EventNote
from gpuctl.rollout.fleet.pass_holds import rollout_holds
from gpuctl.rollout.fleet.prometheus import GATE_RECHECK_SECONDS
from gpuctl.rollout.fleet.soak import soak
from gpuctl.rollout.fleet.windows import WindowState, window_state, window_status
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.input.settings import SettingsError, max_unavailable
from gpuctl.rollout.place.placement import placement, waits_unwritten
from gpuctl.rollout.place.refused import anothers_step
from gpuctl.rollout.reasons import Hold, HoldKind, RolloutState
from gpuctl.rollout.report.history import recorded
from gpuctl.rollout.report.messages import driver_events, rollout_message
from gpuctl.rollout.report.status import RolloutCounts, rollout_status
from gpuctl.rollout.start.starts import start_nodes
from gpuctl.rollout.step.phases import STEPS
from gpuctl.rollout.step.reboots import (
    boot_recorded,
    reboot_taken_up,
    rebooted_in_use,
    step_blocked_after_reboot,
)
from gpuctl.rollout.step.worker_hold import cleanup, let_go_first
from gpuctl.rollout.step.writes import StepResult, removing, written


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


def _own_step(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """What a node in its place does: its step, a Done node's look at its boot (reboots.py),
    a Blocked or Failed node's held KMM worker Pods (worker_hold.py)."""
    if node.phase in STEPS:
        return STEPS[node.phase](inp, node)
    if node.phase is Phase.DONE:
        return boot_recorded(inp, node)
    if rebooted_in_use(node):
        return step_blocked_after_reboot(inp, node)
    if node.phase in (Phase.BLOCKED, Phase.FAILED):
        return cleanup(node)
    return StepResult()


def _node_place(inp: RolloutInput, node: NodeFacts, decision: Decision) -> tuple[Phase, str] | None:
    """The node's phase and version in this pass (None: not in this GPUDriver's rollout),
    its placement, reboot or own step taken into `decision`."""
    if anothers_step(node, inp.driver_name):
        return None  # that GPUDriver finishes its step first (place/refused.py)
    rebooted = reboot_taken_up(inp, node)
    if rebooted is not None:
        # KMM's loader runs at the new boot whatever the node's phase: before anything
        # else, the node is held and verified again at what KMM loads there (reboots.py).
        result, phase, version = rebooted
        decision.take(result)
        return phase, version
    place = placement(inp, node)
    if place is None and node.phase is None and removing(inp.target_for(node)):
        return None  # neither wanted nor loaded for this GPUDriver: not in its rollout
    if place is not None:
        decision.actions.append(place)
    after, version = _after(node, place)
    if after is None:
        return None  # it left the rollout
    if place is None and waits_unwritten(inp, node):
        return Phase.PENDING, inp.target_for(node)
    if place is None:
        decision.take(_own_step(inp, node))
    return after, version


def _decide(inp: RolloutInput) -> Decision:
    decision = Decision()
    nodes = {n.name: n for n in sorted(inp.nodes, key=lambda n: n.name)}
    phases: dict[str, Phase] = {}
    versions: dict[str, str] = {}
    targets: dict[str, str] = {}
    for name, node in nodes.items():
        placed = _node_place(inp, node, decision)
        if placed is not None:
            phases[name], versions[name] = placed
            targets[name] = inp.target_for(node)
    decision.node_phases, decision.node_versions = phases, versions
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
    _history(inp, counts, [nodes[name] for name in phases], decision)
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
    """The soak of the nodes verified at the target (fleet/soak.py); the soaking ones in words."""
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


def _history(
    inp: RolloutInput, counts: RolloutCounts, rollout: Sequence[NodeFacts], decision: Decision
) -> None:
    """status.revisions with this pass's target recorded (`rollout`: its nodes as read, the
    Done ones counted at the version they are Done at)."""
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
        done_at=Counter(n.state_version for n in rollout if n.phase is Phase.DONE),
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
    if inp.rollback.get("gitops") and inp.rollback.get("from") == target:
        return None  # recorded, and left to Git (pass_holds.rollback_in_git_words)
    failed = sorted(
        name
        for name, phase in phases.items()
        if phase is Phase.FAILED
        and versions[name] == target
        and written(inp, nodes[name], target)
        and names.REBOOTED not in nodes[name].annotations  # the boot changed, not the version
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
