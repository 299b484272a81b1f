"""Which nodes start in a pass, and the Blocked ones asked again (pure).

New nodes start (Pending, or Blocked nodes whose blocker went away) only while the
unavailable nodes — in progress, cordoned by anyone, or NotReady — stay within
maxUnavailable, and only while nothing holds the rollout (gpuctl/rollout/fleet/pass_holds.py).
A Pending node whose GPU serves nothing (gpuctl/rollout/input/driverless.py) starts whatever
that count: it has no capacity to take away; once started it counts like any other, and at most
maxUnavailable such nodes are in a step at once (`driverless_room`). A node
verified Done in this pass frees its slot for a start in the same pass unless a Done can hold
the starts (an unreleased holdAfterFirstNode, a soak); a start that takes such a slot names the
node that frees it (`PatchNode.freed_by`). They start in the order of
gpuctl.rollout.start.order. A start needs a Prometheus gate answer young enough: with an older
one, the decision asks for a fresh one instead (`Decision.ask_gate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.actions import Action, PatchNode, RequestReport
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.fleet.pass_holds import Gates, gate_answer_fresh
from gpuctl.rollout.input.facts import INSPECT, NodeFacts, RolloutInput
from gpuctl.rollout.reasons import Block, BlockKind, HoldKind, Wait, WaitKind
from gpuctl.rollout.start.order import is_unavailable, start_order
from gpuctl.rollout.start.started import rollout_started
from gpuctl.rollout.step.kernel_proof import blocked_by_probe, kernel_proof, rechecks
from gpuctl.rollout.step.pause import not_selecting_block, still_not_selecting
from gpuctl.rollout.step.reboots import rebooted_in_use
from gpuctl.rollout.step.writes import (
    NOT_READY,
    blocked,
    claims_unknown,
    drain_block,
    epoch,
    foreign_target,
    image_not_ready,
    kmm_loaded,
    preflight_block,
    removing,
    transition,
    unfixable_block,
    written,
)


def _unblocked(inp: RolloutInput, node: NodeFacts) -> bool:
    """A Blocked node's latest recheck shows nothing the rollout cannot clear."""
    if not node.ready or node.claims or node.gpu_pods is None or claims_unknown(node):
        return False
    if not removing(inp.target_for(node)) and (foreign_target(inp, node) or _unproven(inp, node)):
        return False
    if image_not_ready(inp, node) is not None or still_not_selecting(inp, node):
        return False
    if node.gpu_pods and not inp.settings.evict_gpu_pods:
        return False
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return False
    report = call.report
    refused = preflight_block(inp, report, node)
    return refused is None and unfixable_block(inp, report, node, clearable=True) is None


def _unproven(inp: RolloutInput, node: NodeFacts) -> bool:
    """A reload whose image is not proven to hold the node's kernel's modules yet, or is
    proven to lack them (gpuctl/rollout/step/kernel_proof.py)."""
    return kernel_proof(inp, node).block is not None


def _blocker(inp: RolloutInput, node: NodeFacts) -> Block | None:
    """What keeps a Blocked node blocked, from this pass's facts (None when they do not say)."""
    foreign = None if removing(inp.target_for(node)) else foreign_target(inp, node)
    standing = (NOT_READY if not node.ready else None, claims_unknown(node), foreign)
    for block in (*standing, image_not_ready(inp, node), blocked_by_probe(inp, node)):
        if block is not None:
            return block
    stuck = still_not_selecting(inp, node)
    # its DaemonSet has not changed since the drain found it (gpuctl/rollout/step/pause.py)
    if stuck:
        return not_selecting_block(stuck)
    waiting = drain_block(inp, node, paused=False)  # its daemons run: not paused yet
    if waiting is not None:
        return Block(waiting.kind, f"waiting for {waiting.words}")
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        return None
    refused = preflight_block(inp, call.report, node)
    return refused or unfixable_block(inp, call.report, node, clearable=True)


def _recheck(inp: RolloutInput, node: NodeFacts, decision: Decision) -> None:
    """Ask a Blocked node's agent again once the last answer is old enough; its image's
    probe made, or run again once its lack is old enough (gpuctl/rollout/step/kernel_proof.py)."""
    probe_work, probe_due = rechecks(inp, node)
    decision.actions.extend(probe_work)
    if probe_due is not None:
        decision.wake(probe_due)
    call = node.call(INSPECT)
    now = epoch(inp.now)
    every = inp.blocked_recheck_seconds
    if call is None or (call.finished_at is not None and now - call.finished_at >= every):
        decision.actions.append(RequestReport(node.name, node.attempt))
        decision.wake(every)
    elif call.finished_at is not None:
        decision.wake(every - (now - call.finished_at))


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
        if is_unavailable(
            phase, unschedulable=unschedulable, ready=node.ready, driverless=node.driverless
        ):
            unavailable.add(name)
    return unavailable


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


def start_nodes(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    decision: Decision,
    *,
    gates: Gates,
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
    room = driverless_room(nodes, phases, bound)
    for name in start_order({name: name in unavailable for name in nodes}):
        node = nodes[name]
        if name in touched:
            continue
        phase = phases[name]
        version = inp.target_for(node)
        if phase is Phase.DONE and node.state_version == version and node.cordoned_by_us:
            decision.actions.append(_release_cordon(node))
            continue
        if phase not in (Phase.PENDING, Phase.BLOCKED) or rebooted_in_use(node):
            continue  # Blocked by what a reboot brought up: its own step (reboots.py)
        wait = why_waiting(
            inp, node, phase, gates, unavailable=unavailable, bound=bound, driverless_room=room
        )
        if wait is not None:
            decision.waits[name] = wait
            if wait.kind is WaitKind.BLOCKED:
                _still_blocked(inp, node, wait, decision)
            elif wait.kind is WaitKind.HELD and phase is Phase.PENDING and node.driverless:
                held = _held_driverless(inp, node, wait)
                if held is not None:
                    decision.actions.append(_leaving(inp, node, phase, held))
            elif wait.kind is WaitKind.NODE_NOT_READY and phase is Phase.PENDING:
                not_ready = blocked(inp, node, NOT_READY, version)
                decision.actions.append(_leaving(inp, node, phase, not_ready))
            elif wait.kind is WaitKind.MAX_UNAVAILABLE:
                held_back = held_back or _unavailable_words(nodes, phases, unavailable)
            elif wait.kind is WaitKind.GATE_NOT_ASKED:
                decision.ask_gate = True  # the controller asks afresh and decides again
            continue
        room -= node.driverless
        freed_by = "" if name in unavailable else slots.take()
        if freed_by is None:
            continue  # cannot be: the bound above counts the freed slots
        unavailable.add(name)
        start = _leaving(inp, node, phase, _start_write(inp, node, phase, version))
        decision.actions.append(dataclasses.replace(start, freed_by=freed_by))
    return held_back


def driverless_room(nodes: Mapping[str, NodeFacts], phases: Mapping[str, Phase], bound: int) -> int:
    """How many more driverless nodes may start without a slot: maxUnavailable of them in a
    step at once (a fresh install, every node without a driver, still goes a bound at a time,
    and never cordons the whole fleet at once)."""
    started = sum(
        1
        for name, node in nodes.items()
        if phases[name] in IN_PROGRESS and names.STARTED_DRIVERLESS in node.annotations
    )
    return bound - started


def _start_write(inp: RolloutInput, node: NodeFacts, phase: Phase, version: str) -> PatchNode:
    """A node's start: its checks; or, for a Pending node KMM has loaded at `version` already
    (targeted before the rollout reached it, gpuctl/rollout/place/placement.py), its verification:
    Done only on
    its agent's word in this boot, never on KMM's labels alone."""
    if phase is Phase.PENDING and written(inp, node, version) and kmm_loaded(inp, node, version):
        reason = f"loaded at {version} before the rollout reached it: verifying it"
        return transition(inp, node, Phase.VERIFYING, reason, version=version)
    if node.driverless:
        # Its GPU serves nothing: it took no slot (gpuctl/rollout/input/driverless.py).
        reason = "its GPU has no driver: started without waiting for a slot; asking the agent"
        write = transition(inp, node, Phase.CHECKING, reason, version=version)
        annotations = {**write.annotations, names.STARTED_DRIVERLESS: node.boot_id}
        return dataclasses.replace(write, annotations=annotations)
    reason = "asking the agent for a fresh report"
    return transition(inp, node, Phase.CHECKING, reason, version=version)


def _leaving(inp: RolloutInput, node: NodeFacts, phase: Phase, write: PatchNode) -> PatchNode:
    """`write`, leaving the phase the pass gives the node: for a node Pending without a write
    (placement.waits_unwritten), Pending, where it has waited since the rollout began."""
    if node.phase is phase:
        return write
    return dataclasses.replace(write, phase_from=phase, phase_since=rollout_started(inp))


def why_waiting(
    inp: RolloutInput,
    node: NodeFacts,
    phase: Phase,
    gates: Gates,
    *,
    unavailable: set[str],
    bound: int,
    driverless_room: int = 0,
) -> Wait | None:
    """Why a Pending or Blocked node does not start now (None: it starts). The one answer
    the pass acts on, the status lists and the metrics count."""
    version = inp.target_for(node)
    if phase is Phase.BLOCKED and node.state_version == version and not _unblocked(inp, node):
        fresh = _blocker(inp, node)
        words = fresh.words if fresh is not None else node.reason
        return Wait(WaitKind.BLOCKED, words, block=fresh)
    hold = gates.of(version, node.name)
    if hold is not None:
        return Wait(WaitKind.HELD, hold.words, hold=hold)
    if not node.ready:
        return Wait(WaitKind.NODE_NOT_READY, NOT_READY.words, block=NOT_READY)
    takes_no_slot = (
        phase in (Phase.PENDING, Phase.BLOCKED) and node.driverless and driverless_room > 0
    )
    if not takes_no_slot and len(unavailable) + (node.name not in unavailable) > bound:
        words = f"maxUnavailable ({bound}) nodes are unavailable already"
        return Wait(WaitKind.MAX_UNAVAILABLE, words)
    if not gate_answer_fresh(inp):
        return Wait(WaitKind.GATE_NOT_ASKED, "asking the Prometheus gate before it starts")
    return None


def _still_blocked(inp: RolloutInput, node: NodeFacts, wait: Wait, decision: Decision) -> None:
    """A Blocked node still blocked: by something else now (the status says what), or by
    what its reason says already (asked again when due)."""
    fresh = wait.block
    if fresh is not None and fresh.words.removeprefix("waiting for ") not in node.reason:
        decision.actions.append(blocked(inp, node, fresh, inp.target_for(node)))
    else:
        _recheck(inp, node, decision)


# Holds that pass by themselves within moments: a driverless node waits them out Pending.
PASSING_HOLDS = frozenset(
    {HoldKind.MODULE_NOT_READY, HoldKind.PROMETHEUS_GATE, HoldKind.ROLLING_BACK}
)


def _held_driverless(inp: RolloutInput, node: NodeFacts, wait: Wait) -> PatchNode | None:
    """A node whose GPU has no driver, kept from its start by a lasting rollout-wide hold:
    Blocked, saying so and which hold (it would start at once otherwise)."""
    if wait.hold is not None and wait.hold.kind in PASSING_HOLDS:
        return None
    words = (
        f"its GPU has no driver (KMM loads none here); {wait.words}: it starts first, "
        "without a slot, once that hold lifts"
    )
    return blocked(inp, node, Block(BlockKind.DRIVERLESS_HELD, words), inp.target_for(node))


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
