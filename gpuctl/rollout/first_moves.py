"""What the rollout does first to each node, read off its own decision (pure).

`move_of` names, per node, what one pass's `decide()` does to it: starts it, leaves it
waiting (and why: the Wait the pass acted on), moves its step on, puts it in its place, lets
it leave the rollout, or nothing. `dry_run` is what `gpuctl rollout plan` shows: the
coordinator's passes on the caller's reads, each pass's node writes made on the nodes before
the next (an older version's Done node is Pending without a write, and starts, or waits, in
the same pass), with each node's latest agent report lent as the answer to its check, and its
reload's image taken as proven to hold its kernel's modules (the probe the check runs first,
gpuctl/rollout/step/kernel_proof.py: the plan says so, it cannot run it). A node
that starts is followed through its checks up to where the agent's hands are needed
(Preparing) or a person's (Blocked, Failed). `at_their_turn` is the same run with every
rollout-wide wait lifted: where a waiting node's own checks take it once the wait is over.
Nothing is asked and nothing is written.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.actions import EvictPods, PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.build import Reads, rollout_input
from gpuctl.rollout.input.facts import (
    INSPECT,
    CallState,
    GpuPod,
    NodeFacts,
    ReportFacts,
    RolloutInput,
    node_facts,
)
from gpuctl.rollout.input.image_probe import ImageProbe, ProbeOutcome, probe_name
from gpuctl.rollout.reasons import Wait
from gpuctl.rollout.step.kernel_proof import kmm_kernel, needs_proof
from gpuctl.rollout.step.writes import epoch

# Passes of a dry run: a node is placed at most twice before its first move, which its step
# follows through Checking and Draining to Preparing at most.
MAX_PASSES = 8


class MoveKind(enum.StrEnum):
    START = "start"  # Pending or Blocked -> Checking in this pass
    WAIT = "wait"  # could start, does not: Move.wait says why
    STEP = "step"  # in a step of the rollout: it goes on
    PLACE = "place"  # put in its place: Skipped, Done, Pending, Loading, ...
    LEAVE = "leave"  # leaves the rollout (nothing of this GPUDriver is loaded there)
    STAY = "stay"  # nothing this pass


@dataclass(frozen=True)
class Move:
    kind: MoveKind
    # The phase the pass's write gives the node (None: no phase change).
    phase_to: Phase | None = None
    wait: Wait | None = None


def _writes(decision: Decision, node: str) -> list[PatchNode]:
    return [a for a in decision.actions if isinstance(a, PatchNode) and a.node == node]


def _acts_on(decision: Decision, node: str) -> bool:
    return any(getattr(a, "node", None) == node for a in decision.actions)


def move_of(node: NodeFacts, decision: Decision) -> Move:
    """What the pass that made `decision` does to `node`."""
    wait = decision.waits.get(node.name)
    if wait is not None:
        return Move(MoveKind.WAIT, None, wait)
    writes = _writes(decision, node.name)
    phase_to = next((w.phase_to for w in writes if w.phase_to is not None), None)
    if any(names.STATE_LABEL in w.labels and w.labels[names.STATE_LABEL] is None for w in writes):
        return Move(MoveKind.LEAVE)
    waiting = decision.node_phases.get(node.name, node.phase)  # Pending without a write too
    if phase_to is Phase.CHECKING and waiting in (Phase.PENDING, Phase.BLOCKED):
        return Move(MoveKind.START, phase_to)
    if node.phase in IN_PROGRESS and (writes or _acts_on(decision, node.name)):
        return Move(MoveKind.STEP, phase_to)
    if phase_to is not None:
        return Move(MoveKind.PLACE, phase_to)
    return Move(MoveKind.STAY)


def patched(node: Mapping[str, Any], write: PatchNode) -> dict[str, Any]:
    """The Node as `write` (a merge patch of labels, annotations and the cordon) leaves it."""
    meta = dict(node.get("metadata") or {})
    for key, changes in (("labels", write.labels), ("annotations", write.annotations)):
        values = dict(meta.get(key) or {})
        for name, value in changes.items():
            if value is None:
                values.pop(name, None)
            else:
                values[name] = value
        meta[key] = values
    spec = dict(node.get("spec") or {})
    if write.unschedulable is not None:
        spec["unschedulable"] = write.unschedulable
    return {**node, "metadata": meta, "spec": spec}


# A followed node stops here: the next step needs the agent's hands (prepare), or a person.
_FOLLOWED_TO = (Phase.PREPARING, Phase.BLOCKED, Phase.FAILED)


@dataclass(frozen=True)
class NodeRun:
    """One node in a dry run."""

    # Its first move that is not a placement: what the coordinator does first.
    move: Move
    # The phases it was placed in before that move.
    placed: tuple[Phase, ...] = ()
    # For a node that starts or is in a step: the phases its step then reaches, on the
    # agent reports lent to the run, up to where the agent must act (Preparing) or a person.
    then: tuple[Phase, ...] = ()
    # The reason the last of those writes records ("" without one).
    reason: str = ""
    # The GPU pods the step evicts on the way.
    evicts: tuple[GpuPod, ...] = ()


@dataclass(frozen=True)
class DryRun:
    nodes: Mapping[str, NodeRun]
    # The first pass: its status is what the coordinator would write now.
    inp: RolloutInput
    decision: Decision


def _lent_calls(
    reads: Reads, nodes: Sequence[Mapping[str, Any]], answers: Mapping[str, ReportFacts]
) -> dict[str, Mapping[str, CallState]]:
    """The reads' agent calls, with each lent report standing as the answer to the inspect
    request of the node's current step, wherever the reads have none."""
    calls = {name: dict(kinds) for name, kinds in reads.calls.items()}
    moment = epoch(reads.now)
    for node in nodes:
        facts = node_facts(node)
        answer = answers.get(facts.name)
        own = calls.setdefault(facts.name, {})
        if answer is None or INSPECT in own:
            continue
        own[INSPECT] = CallState(INSPECT, facts.attempt, moment, moment, report=answer)
    return dict(calls)


def _probes_lent(inp: RolloutInput) -> RolloutInput:
    """Each reload's image probe standing as run and proven (gpuctl/rollout/step/kernel_proof.py),
    where the
    reads have none: the plan follows the checks past it and says it is run first."""
    return dataclasses.replace(inp, nodes=[_proven(inp, node) for node in inp.nodes])


def _proven(inp: RolloutInput, node: NodeFacts) -> NodeFacts:
    if not needs_proof(inp, node) or node.image_probes:
        return node
    image, kernel = node.target_image, kmm_kernel(node)
    name = probe_name(inp.driver_name, node.name, image, kernel)
    return dataclasses.replace(
        node, image_probes=(ImageProbe(name, image, kernel, ProbeOutcome.HOLDS),)
    )


@dataclass
class _Run:
    move: Move | None = None
    placed: list[Phase] = dataclasses.field(default_factory=list)
    then: list[Phase] = dataclasses.field(default_factory=list)
    reason: str = ""
    evicts: tuple[GpuPod, ...] = ()

    def followed(self) -> bool:
        if self.move is None or self.move.kind not in (MoveKind.START, MoveKind.STEP):
            return False
        return not self.then or self.then[-1] not in _FOLLOWED_TO


def dry_run(reads: Reads, answers: Mapping[str, ReportFacts] | None = None) -> DryRun:
    """The coordinator's passes on `reads`, each pass's node writes made before the next, with
    `answers` (node -> its agent's latest report) lent as inspect answers; until no node is
    placed nor moves on."""
    runs: dict[str, _Run] = {}
    nodes: Sequence[Mapping[str, Any]] = list(reads.nodes)
    first: tuple[RolloutInput, Decision] | None = None
    for _ in range(MAX_PASSES):
        calls = _lent_calls(reads, nodes, answers or {})
        inp = _probes_lent(rollout_input(dataclasses.replace(reads, nodes=nodes, calls=calls)))
        decision = decide(inp)
        first = first or (inp, decision)
        if not _record(inp, decision, runs):
            break
        nodes = _written(nodes, decision)
    assert first is not None
    return DryRun(
        {
            name: NodeRun(
                run.move or Move(MoveKind.STAY),
                tuple(run.placed),
                tuple(run.then),
                run.reason,
                run.evicts,
            )
            for name, run in runs.items()
        },
        *first,
    )


def _record(inp: RolloutInput, decision: Decision, runs: dict[str, _Run]) -> bool:
    """Notes what the pass did to each node; whether a node was placed or moved on."""
    progressed = False
    for node in inp.nodes:
        run = runs.setdefault(node.name, _Run())
        move = move_of(node, decision)
        if run.move is None:
            if move.kind is MoveKind.PLACE and move.phase_to is not None:
                run.placed.append(move.phase_to)
                progressed = True
            else:
                run.move = move
                progressed |= move.kind in (MoveKind.START, MoveKind.STEP)
            continue
        if not run.followed():
            continue
        for write in _writes(decision, node.name):
            if write.phase_to is not None:
                run.then.append(write.phase_to)
                run.reason = str(write.annotations.get(names.REASON) or "")
                progressed = True
        for action in decision.actions:
            if isinstance(action, EvictPods) and action.node == node.name:
                run.evicts = action.pods
    return progressed


def _written(nodes: Sequence[Mapping[str, Any]], decision: Decision) -> list[Mapping[str, Any]]:
    """The nodes as the pass's node writes leave them, in the order it makes them."""
    out = {str(n["metadata"]["name"]): n for n in nodes}
    for action in decision.actions:
        if isinstance(action, PatchNode) and action.node in out:
            out[action.node] = patched(out[action.node], action)
    return list(out.values())


def at_their_turn(reads: Reads, answers: Mapping[str, ReportFacts] | None = None) -> DryRun:
    """The dry run with every rollout-wide wait lifted (maxUnavailable, pause, the holds, the
    windows, the gate, soak, the failure budget): where each node's own checks take it when
    its turn comes. What the plan shows beside a node that waits now; never acted on."""
    lifted = dataclasses.replace(
        reads.settings,
        max_unavailable="100%",
        paused=False,
        hold_after_first_node=False,
        maintenance_windows=(),
        prometheus_gate=None,
        soak_seconds=0.0,
        failure_budget=len(reads.nodes) + 1,
    )
    return dry_run(dataclasses.replace(reads, settings=lifted), answers)
