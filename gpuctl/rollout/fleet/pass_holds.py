"""The rollout-wide holds of one pass: why no new node may start now, for loads and for
removals (pure). The failure budget and a pause hold both; then the maintenance windows and
the Prometheus gate (time and health); then, for loads alone, the Module not asking for the
target yet, a soak, a rollback, the hold after the first node. Each is a typed Hold
(gpuctl.rollout.reasons): its kind gives the rollout's state, its words the message.

`fleet_holds` is the fleet stage of decide.py's pass: the maintenance windows now (a pass is
due when one opens or closes), the soak of the nodes verified at the target (soak.py), then the
holds; a pass is due soon while the Prometheus gate holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.fleet.gates import GateFacts, rollout_gate
from gpuctl.rollout.fleet.soak import soak
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.input.prometheus import GATE_RECHECK_SECONDS
from gpuctl.rollout.input.windows import WindowState, window_state, window_words
from gpuctl.rollout.place.counts import RolloutCounts
from gpuctl.rollout.reasons import Hold, HoldKind
from gpuctl.rollout.step.writes import removing


@dataclass(frozen=True)
class Gates:
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


def _rollback_in_git(inp: RolloutInput) -> bool:
    """A rollback from the target is recorded but left to Git (a GitOps tool owns the spec),
    and `gpuctl rollout resume` has not released the target."""
    record = inp.rollback
    return (
        bool(record.get("gitops"))
        and bool(inp.target_version)
        and record.get("from") == inp.target_version
        and inp.resumed_version != inp.target_version
    )


def rollback_in_git_words(rollback: Mapping[str, Any]) -> str:
    nodes = ", ".join(str(n) for n in rollback.get("nodes") or [])
    return (
        f"paused: {rollback.get('from')} failed on {nodes} ({rollback.get('reason')}); "
        f"spec.kernelModule is applied by {rollback.get('gitops')}, so the coordinator does not "
        f"roll it back (the next sync would undo that): put revision {rollback.get('revision')} "
        f"({rollback.get('to')}) back in Git, or `gpuctl rollout resume` to go on with "
        f"{rollback.get('from')}"
    )


def _rollback_gates(inp: RolloutInput, phases: Mapping[str, Phase]) -> Gates:
    """Only the rollback's nodes start; rolling back while one of them still moves."""
    nodes = frozenset(str(n) for n in inp.rollback.get("nodes") or [])
    moving = any(phases.get(n) in (Phase.PENDING, *IN_PROGRESS) for n in nodes)
    kind = HoldKind.ROLLING_BACK if moving else HoldKind.ROLLED_BACK
    return Gates(Hold(kind, rollback_words(kind, inp.rollback)), None, nodes)


def _time_and_health_gate(inp: RolloutInput, window: WindowState | None) -> Hold | None:
    """Why no node (load or removal) may start now for the time or the fleet's health."""
    if window is not None and not window.open:
        return Hold(HoldKind.OUTSIDE_WINDOWS, window_words(window))
    if inp.gate is not None and not inp.gate.passed:
        return Hold(HoldKind.PROMETHEUS_GATE, f"held by the gate: {inp.gate.words}")
    if inp.kured_holder:
        return Hold(
            HoldKind.KURED_REBOOTING,
            f"kured holds its reboot lock: {inp.kured_holder}; no node starts until kured lets "
            "it go (gpuctl then holds it while a node is in a step)",
        )
    return None


def gate_answer_fresh(inp: RolloutInput) -> bool:
    """A start may rest on the Prometheus gate's answer: there is no gate, or its answer is
    no older than the gate's maxAnswerAge (asked after `now`, in the same pass, counts as
    age 0)."""
    gate = inp.settings.prometheus_gate
    if gate is None:
        return True
    if inp.gate is None:
        return False
    return (inp.now - inp.gate.asked_at).total_seconds() <= gate.max_answer_age


def rollout_holds(
    inp: RolloutInput,
    counts: RolloutCounts,
    phases: Mapping[str, Phase] | None = None,
    window: WindowState | None = None,
    soaking: str = "",
) -> Gates:
    if _rollback_in_git(inp):
        # Before the failure budget: what the admin must do is say where the revision goes.
        return Gates(Hold(HoldKind.ROLLBACK_IN_GIT, rollback_in_git_words(inp.rollback)), None)
    return _holds(inp, counts, phases, window, soaking)


def _holds(
    inp: RolloutInput,
    counts: RolloutCounts,
    phases: Mapping[str, Phase] | None,
    window: WindowState | None,
    soaking: str,
) -> Gates:
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
        return Gates(gate, gate)
    held = _time_and_health_gate(inp, window)
    if held is not None and gate is not None:
        # Held after the first node: loads wait for a person first, whatever the time or
        # the gate say (the status names what a person must do); removals for the hold.
        return Gates(gate, held)
    if held is not None:
        return Gates(held, held)
    if not inp.target_version:
        return Gates(None, None)
    if not inp.module_ready:
        waiting = inp.module_wait_reason or "waiting for the Module"
        return Gates(Hold(HoldKind.MODULE_NOT_READY, waiting), None)
    return _load_gates(inp, gate, phases or {}, soaking)


def _load_gates(
    inp: RolloutInput, gate: Hold | None, phases: Mapping[str, Phase], soaking: str
) -> Gates:
    """The gates of loads alone, once the Module asks for the target: a soak, a rollback,
    the hold after the first node."""
    if soaking:
        words = f"soaking before the next node starts: {soaking}"
        return Gates(Hold(HoldKind.SOAKING, words), None)
    if _rollback_active(inp):
        return _rollback_gates(inp, phases)
    return Gates(gate, None)


def rollback_words(kind: HoldKind, rollback: Mapping[str, Any]) -> str:
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


def fleet_holds(
    inp: RolloutInput,
    decision: Decision,
    *,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    counts: RolloutCounts,
) -> tuple[WindowState | None, Gates]:
    """What holds the whole fleet in this pass, the windows' and the soak's writes and wake-ups
    taken into `decision`: the windows now (None without any) and the holds."""
    window = _window(inp, decision)
    _first_batch_soaks_only(inp, nodes, decision)
    soaking = _soak(inp, nodes, phases, decision)
    gates = rollout_holds(inp, counts, phases, window, soaking)
    if gates.load is not None and gates.load.kind is HoldKind.PROMETHEUS_GATE:
        decision.wake(GATE_RECHECK_SECONDS)
    return window, gates


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
    """The soak of the nodes verified at the target (gpuctl/rollout/fleet/soak.py); the soaking ones
    in words."""
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
