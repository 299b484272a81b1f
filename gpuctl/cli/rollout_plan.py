"""`gpuctl rollout plan`: which nodes KMM would touch, how, and whether each may go now.

Pure: the GPUDriver, its KMM Module (None before the first install), and per-node facts in
(the Node with its labels and kernel, the agent's latest report from the GPUNode, GPU pods,
allocated GPU ResourceClaims); one row per node KMM would touch out, in the order the
coordinator starts nodes (gpuctl.rollout.order), under a line naming the rollout-wide
gate that keeps every node from starting (failure budget, paused, held after the first node:
gpuctl.rollout.gates, the coordinator's own rule).

The action (load, reload, unload, none) and its words come from kmm_touch.py over the shared
targeting rule. Whether the node may go now answers the questions the coordinator's check and
prepare steps ask, with the same unload rule (gpuctl.common.unload_rule), from the same facts:
- skip     the node opted out (label gpuctl.dev/rollout=skip);
- done     the node is already Done at the Module's version (action none);
- go       nothing stops it (notes say what preparation would change), or KMM is at it
           already (the node is labelled for the target);
- wait     GPU pods must finish first (eviction is off);
- blocked  a person must act: busy devices, claims, a node Failed at the target, or an
           unknown: no fresh agent report (a GPUNode whose Fresh condition is False is
           unknown), claims that could not be listed, NotReady.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.kmm_touch import Action, Target, Touch, module_ref, target_of, touch
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.table import format_table
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase, parse_phase
from gpuctl.common.node_selectors import node_labels, node_name
from gpuctl.common.unload_rule import (
    UnloadSettings,
    UnloadVerdict,
    modules_unloaded_with,
    unload_verdict,
)
from gpuctl.rollout.gates import GateFacts, rollout_gate
from gpuctl.rollout.order import is_unavailable, start_order

CLAIMS_UNKNOWN = "allocated GPU ResourceClaims are unknown (unknown is never safe)"


@dataclass(frozen=True)
class PlanSettings:
    evict_gpu_pods: bool = False
    disable_idle_vfs: bool = False
    # Modules KMM unloads before the driver (modulesLoadingOrder after its first entry): their
    # holding the driver does not block.
    unloaded_with: tuple[str, ...] = ()
    # The module's PCI driver (kernelModule.moduleName); "" means the module each report names.
    driver: str = ""

    @property
    def unload(self) -> UnloadSettings:
        return UnloadSettings(self.driver, self.disable_idle_vfs, self.unloaded_with)


def plan_settings(driver: Mapping[str, Any]) -> PlanSettings:
    spec = driver.get("spec") or {}
    rollout = spec.get("rollout") or {}
    kernel_module = spec.get("kernelModule") or {}
    return PlanSettings(
        evict_gpu_pods=bool(rollout.get("evictGPUPods", False)),
        disable_idle_vfs=bool(rollout.get("disableIdleVFs", False)),
        unloaded_with=tuple(modules_unloaded_with(kernel_module.get("modulesLoadingOrder"))),
        driver=str(kernel_module.get("moduleName") or ""),
    )


@dataclass(frozen=True)
class NodeFacts:
    """One Node (as the API returns it) and what the coordinator would check on it."""

    node: Mapping[str, Any]
    view: NodeView | None = None
    gpu_pods: Sequence[str] = ()
    claims: Sequence[str] = ()

    @property
    def name(self) -> str:
        return node_name(self.node)

    @property
    def labels(self) -> dict[str, str]:
        return node_labels(self.node)

    @property
    def annotations(self) -> Mapping[str, str]:
        return dict((self.node.get("metadata") or {}).get("annotations") or {})

    @property
    def ready(self) -> bool | None:
        """True Ready, False NotReady, None unknown."""
        for condition in (self.node.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready":
                return {"True": True, "False": False}.get(condition.get("status"))
        return None

    @property
    def unschedulable(self) -> bool:
        """Cordoned, by anyone."""
        return bool((self.node.get("spec") or {}).get("unschedulable"))


@dataclass(frozen=True)
class PlanInput:
    driver: Mapping[str, Any]
    # The Module the GPUDriver's status.module names; None when there is none (yet).
    module: Mapping[str, Any] | None
    # Every Node: the plan keeps those KMM would touch.
    nodes: Sequence[NodeFacts]
    # Why allocated ResourceClaims could not be listed ("" when they were, or DRA is not
    # served): then every node's claims are unknown.
    claims_unknown: str = ""


@dataclass(frozen=True)
class PlannedNode:
    name: str
    action: Action
    # What KMM would do and why, in words.
    change: str
    verdict: str
    reasons: tuple[str, ...]
    now: str


@dataclass(frozen=True)
class Plan:
    driver: str
    # "<namespace>/<name>" of the Module; "" when the GPUDriver names none yet.
    module: str
    # The Module's version; None when there is no Module (first install).
    version: str | None
    nodes: tuple[PlannedNode, ...]
    claims_unknown: str = ""
    # A rollout-wide gate that keeps every new node from starting, in words ("" for none).
    gate: str = ""


@dataclass(frozen=True)
class _Touched:
    facts: NodeFacts
    touch: Touch
    # The unload rule's verdict on the node's agent report.
    agent: UnloadVerdict


def plan_rollout(inp: PlanInput) -> Plan:
    """Every node KMM would touch, in the coordinator's order, with action and verdict."""
    target = target_of(inp.driver, inp.module)
    settings = plan_settings(inp.driver)
    touched: dict[str, _Touched] = {}
    for facts in inp.nodes:
        report, agent = _agent(facts.view, settings)
        found = touch(target, facts.node, report)
        if found is not None:
            touched[facts.name] = _Touched(facts, found, agent)
    order = start_order({name: _unavailable(t.facts) for name, t in touched.items()})
    ref = module_ref(inp.driver)
    return Plan(
        driver=target.driver,
        module="/".join(ref) if ref is not None else "",
        version=target.version,
        nodes=tuple(_plan_node(target, inp, settings, touched[name]) for name in order),
        claims_unknown=inp.claims_unknown,
        gate=_gate(inp.driver, target, touched.values()),
    )


def _gate(driver: Mapping[str, Any], target: Target, touched: Iterable[_Touched]) -> str:
    """The coordinator's rollout-wide gate (gpuctl.rollout.gates) on these facts."""
    rollout = (driver.get("spec") or {}).get("rollout") or {}
    version = target.version or ""
    failed = updated = total = 0
    for node in touched:
        if node.touch.action is Action.UNLOAD:
            continue
        total += 1
        at_target = bool(version) and node.facts.annotations.get(names.STATE_VERSION) == version
        phase = parse_phase(node.facts.labels.get(names.STATE_LABEL))
        failed += at_target and phase is Phase.FAILED
        updated += node.touch.action is Action.NONE
    annotations = (driver.get("metadata") or {}).get("annotations") or {}
    facts = GateFacts(
        failed=failed,
        failure_budget=int(rollout.get("failureBudget", 1)),
        paused=bool(rollout.get("paused", False)),
        hold_after_first_node=bool(rollout.get("holdAfterFirstNode", True)),
        target_version=version,
        resumed_version=str(annotations.get(names.RESUMED_VERSION, "")),
        updated=updated,
        total=total,
    )
    hold = rollout_gate(facts)
    return hold.words if hold is not None else ""


def _agent(
    view: NodeView | None, settings: PlanSettings
) -> tuple[pb.NodeReport | None, UnloadVerdict]:
    """The node's report if it is fresh (else None), and the unload rule's verdict on it."""
    if view is None:
        return None, unload_verdict(None, settings.unload)
    not_fresh = view.problem
    if not not_fresh and view.connected is not True:
        not_fresh = "agent disconnected"
    verdict = unload_verdict(view.report, settings.unload, not_fresh=not_fresh)
    return (None if not_fresh else view.report), verdict


def _unavailable(node: NodeFacts) -> bool:
    """The node already counts against maxUnavailable, as the coordinator counts it: with the
    phase the coordinator gives it (a step goes on; an opted-out node is Skipped; any other
    is not in a step)."""
    phase = parse_phase(node.labels.get(names.STATE_LABEL))
    if phase not in IN_PROGRESS:
        opted_out = node.labels.get(names.OPT_OUT_LABEL) == names.OPT_OUT_VALUE
        phase = Phase.SKIPPED if opted_out else None
    return is_unavailable(phase, unschedulable=node.unschedulable, ready=node.ready is True)


def _plan_node(
    target: Target, inp: PlanInput, settings: PlanSettings, touched: _Touched
) -> PlannedNode:
    node = touched.facts
    state = node.labels.get(names.STATE_LABEL, "")
    state_version = node.annotations.get(names.STATE_VERSION, "")
    now = f"{state} ({state_version})" if state and state_version else state or "-"
    would, reasons = _would(target, inp, settings, touched)
    return PlannedNode(node.name, touched.touch.action, touched.touch.change, would, reasons, now)


Verdict = tuple[str, tuple[str, ...]]


def _would(target: Target, inp: PlanInput, settings: PlanSettings, touched: _Touched) -> Verdict:
    """The coordinator's order of questions: a node keeps its place when Done or Failed at the
    target or in a step; an opted-out node is skipped; the others are checked."""
    node, found = touched.facts, touched.touch
    phase = parse_phase(node.labels.get(names.STATE_LABEL))
    if found.action is Action.NONE:
        return "done", ("nothing to do",)
    at_target = bool(target.version) and node.annotations.get(names.STATE_VERSION) == target.version
    if phase is Phase.FAILED and at_target:
        why = node.annotations.get(names.REASON, "") or "no reason recorded"
        return "blocked", (f"Failed: {why}; fix it, then `gpuctl rollout retry {node.name}`",)
    if found.released:
        return "go", ("under way: the rollout verifies the load next",)
    opted_out = node.labels.get(names.OPT_OUT_LABEL) == names.OPT_OUT_VALUE
    if opted_out and phase not in IN_PROGRESS:
        return "skip", (f"opted out ({names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}): left alone",)
    return _checked(inp, settings, node, touched.agent)


def _checked(
    inp: PlanInput, settings: PlanSettings, node: NodeFacts, agent: UnloadVerdict
) -> Verdict:
    """go, wait or blocked: what the coordinator's checks would find on the node now."""
    blocked: list[str] = []
    if node.ready is not True:
        blocked.append("node is NotReady" if node.ready is False else "node readiness unknown")
    if inp.claims_unknown:
        blocked.append(CLAIMS_UNKNOWN)
    blocked += [f"allocated GPU ResourceClaim {claim}" for claim in node.claims]
    blocked += agent.messages()
    waiting: list[str] = []
    notes = list(agent.notes)
    if node.gpu_pods:
        pods = ", ".join(node.gpu_pods)
        if settings.evict_gpu_pods:
            notes.append(f"would evict GPU pods: {pods}")
        else:
            waiting.append(f"GPU pods must finish (evictGPUPods is off): {pods}")
    if blocked:
        return "blocked", (*blocked, *waiting)
    if waiting:
        return "wait", tuple(waiting)
    return "go", tuple(notes or ["nothing blocks"])


def render_plan(plan: Plan) -> str:
    lines = [_headline(plan)]
    if plan.gate:
        lines.append(f"No node starts now: the rollout is {plan.gate}.")
    if plan.claims_unknown:
        lines.append(
            f"Allocated GPU ResourceClaims are unknown: {plan.claims_unknown}. Every node "
            "counts as blocked until they can be listed."
        )
    if not plan.nodes:
        lines.append(
            f"No node to change: no node is wanted by the GPUDriver or carries "
            f"{names.TARGET_LABEL}={plan.driver}."
        )
        return "\n".join(lines) + "\n"
    lines.append(_counts(plan))
    rows = []
    order = 0
    for node in plan.nodes:
        position = "-"
        if node.verdict not in ("skip", "done"):
            order += 1
            position = str(order)
        rows.append(
            [
                position,
                node.name,
                node.now,
                node.action.value,
                node.change,
                node.verdict,
                "; ".join(node.reasons),
            ]
        )
    table = format_table(["ORDER", "NODE", "NOW", "ACTION", "CHANGE", "WOULD", "WHY"], rows)
    return "\n".join(lines) + "\n" + table


def _headline(plan: Plan) -> str:
    if plan.version is not None:
        return f"GPUDriver {plan.driver}: target version {plan.version} (Module {plan.module})."
    if plan.module:
        return (
            f"GPUDriver {plan.driver}: Module {plan.module} not found (not created yet, or KMM "
            "is not installed): planned as a first install."
        )
    return (
        f"GPUDriver {plan.driver}: no KMM Module yet (status.module is empty; is "
        "gpuctl-coordinator running?): planned as a first install."
    )


def _counts(plan: Plan) -> str:
    actions = Counter(node.action for node in plan.nodes)
    changing = [
        f"{actions[a]} {a.value}" for a in (Action.LOAD, Action.RELOAD, Action.UNLOAD) if actions[a]
    ]
    words = f"KMM would touch {len(plan.nodes) - actions[Action.NONE]} node(s)"
    words += f": {', '.join(changing)}" if changing else ""
    if actions[Action.NONE]:
        words += f"; {actions[Action.NONE]} at the target already"
    return words + ". In the coordinator's order:"
