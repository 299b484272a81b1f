"""`gpuctl rollout plan`: the coordinator's own decision, run on what the CLI reads (pure).

The facts go into the coordinator's input (gpuctl.rollout.input.build.Reads) exactly as the
coordinator's gatherer puts them, and gpuctl.rollout.first_moves.dry_run makes the
coordinator's passes on them: what the first pass does to each node (start it, leave it
waiting and why, move its step on), and, for a node that starts, where its checks then take it
with each node's latest agent report (its GPUNode) lent as the check's answer: to Preparing,
where the agent's hands are needed, or to Blocked, with the reason the coordinator would
record. So the plan and the coordinator cannot disagree: there is one decision.

What the CLI cannot know, it says: the Prometheus gate is not asked (a node that would start
on its answer says so), and the agent is not asked to prepare.

Per node KMM would touch, the action (load, reload, unload, none) comes from kmm_touch.py; the
verdict reads the run:
- skip     the node opted out (label gpuctl.dev/rollout=skip);
- done     the node is Done at the target (action none);
- go       it starts, and its checks would take it to the agent's preparation (notes say what
           preparation and draining would do), or it is in a step already;
- wait     something passes by itself: a rollout-wide hold, maxUnavailable, the gate not asked,
           GPU pods that must finish (eviction is off);
- blocked  a person must act: busy devices, claims, NotReady, a node Failed at the target, or an
           unknown (no fresh agent report, claims that could not be listed).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuctl.cli.kmm_touch import Touch, TouchKind, module_ref, target_of, touch
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.table import format_table
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase, parse_phase
from gpuctl.common.nodes import node_labels, node_name
from gpuctl.common.unload_rule import unload_verdict
from gpuctl.rollout.first_moves import (
    DryRun,
    Move,
    MoveKind,
    NodeRun,
    at_their_turn,
    dry_run,
)
from gpuctl.rollout.input.build import Reads, module_container, pass_nodes
from gpuctl.rollout.input.driverless import LiveReport, node_driverless
from gpuctl.rollout.input.facts import INSPECT, GpuPod, ReportFacts, node_is_ready, report_facts
from gpuctl.rollout.input.facts import NodeFacts as RolloutNode
from gpuctl.rollout.input.image_probe import modules_folder
from gpuctl.rollout.input.pass_setup import PassSetup, pass_setup
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rollout.input.signing_key import SigningCertificate
from gpuctl.rollout.place.refused import finishing_settings
from gpuctl.rollout.reasons import Wait, WaitKind
from gpuctl.rollout.start.order import is_unavailable, start_order
from gpuctl.rollout.step.kernel_proof import kmm_kernel, needs_proof
from gpuctl.rollout.step.pause import pausable_on_node
from gpuctl.rollout.step.writes import image_not_ready

CLAIMS_UNKNOWN = "allocated GPU ResourceClaims are unknown (unknown is never safe)"
DONE = ("nothing to do",)
GATE_NOT_ASKED = "the plan does not ask the Prometheus gate: it starts if the gate passes"


@dataclass(frozen=True)
class ClusterNode:
    """One Node (as the API returns it), its agent's latest report, its GPU pods and every
    pod on it (who holds its GPU, what the pause takes off it)."""

    node: Mapping[str, Any]
    view: NodeView | None = None
    gpu_pods: tuple[GpuPod, ...] = ()
    pods: tuple[PodFacts, ...] = ()

    @property
    def name(self) -> str:
        return node_name(self.node)


@dataclass(frozen=True)
class RolloutPlanInput:
    driver: Mapping[str, Any]
    # The Module the GPUDriver's status.module names; None when there is none (yet).
    module: Mapping[str, Any] | None
    # Every Node: the plan keeps those KMM would touch.
    nodes: Sequence[ClusterNode]
    # Why allocated ResourceClaims could not be listed ("" when they were, or DRA is not
    # served): then every node's claims are unknown.
    claims_unknown: str = ""
    # The ResourceClaims as listed (the decision keeps the allocated GPU ones per node).
    claims: Sequence[Mapping[str, Any]] = ()
    # Every GPUDriver: an older one loading the driver on the same nodes refuses the rollout.
    drivers: Sequence[Mapping[str, Any]] = ()
    # KMM's ModuleImagesConfig of the Module (None: none): which images KMM has found.
    images_config: Mapping[str, Any] | None = None
    # Why it could not be read ("" when it could): then no image counts as found.
    images_unknown: str = ""
    # The certSecrets the GPUDriver names, as read (gpuctl/rollout/input/signing_key.py), by name.
    signing_certificates: Mapping[str, SigningCertificate] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class PlannedNode:
    name: str
    action: TouchKind
    # What KMM would do and why, in words.
    change: str
    # What the coordinator's first pass does to the node, in a few words.
    next: str
    verdict: str
    reasons: tuple[str, ...]
    now: str
    # The coordinator's first move on the node, after its placements (None: none computed:
    # the node is at the target, or outside a refused rollout).
    first_move: Move | None = None


@dataclass(frozen=True)
class RolloutPlan:
    driver: str
    # "<namespace>/<name>" of the Module; "" when the GPUDriver names none yet.
    module: str
    # The target version (the spec's KMM version); None when there is no Module yet.
    version: str | None
    nodes: tuple[PlannedNode, ...]
    claims_unknown: str = ""
    # What holds the whole rollout now, in the coordinator's words ("" for nothing).
    gate: str = ""
    # Why the rollout is refused ("" when it is not): nodes mid-step finish, none starts.
    refusal: str = ""
    # Why KMM's ModuleImagesConfig could not be read ("" when it could).
    images_unknown: str = ""


def _answers(inp: RolloutPlanInput) -> dict[str, ReportFacts]:
    """Each node's fresh, connected agent report, as the check's answer."""
    out = {}
    for facts in inp.nodes:
        view = facts.view
        if view is not None and view.report is not None and _not_fresh(view) == "":
            out[facts.name] = report_facts(view.report)
    return out


def _not_fresh(view: NodeView | None) -> str:
    """Why the node's report cannot stand as the agent's answer ("" when it can)."""
    if view is None:
        return "no GPUNode: the agent never reported"
    if view.problem:
        return view.problem
    if view.connected is not True:
        return "agent disconnected"
    return ""


def _reads(inp: RolloutPlanInput, setup: PassSetup) -> Reads:
    """The coordinator's input, as its gatherer would build it from these reads."""
    finishing = bool(setup.refusal) or setup.settings is None
    target, settings = setup.target, setup.settings
    if finishing:
        target = str(module_container(inp.module).get("version") or "") or None
        settings = finishing_settings(settings)
    assert settings is not None
    all_nodes = [facts.node for facts in inp.nodes]
    nodes, wanted = pass_nodes(inp.driver, all_nodes, target, finishing=finishing)
    ref = module_ref(inp.driver)
    pods = {facts.name: facts.gpu_pods for facts in inp.nodes}
    all_pods = {facts.name: facts.pods for facts in inp.nodes if facts.pods}
    return Reads(
        driver=inp.driver,
        target=target,
        settings=settings,
        previous=dict((inp.driver.get("status") or {}).get("rollout") or {}),
        namespace=ref[0] if ref is not None else "",
        nodes=nodes,
        wanted=wanted,
        claims=inp.claims,
        claims_trouble=inp.claims_unknown,
        module=inp.module,
        images_config=inp.images_config,
        images_unknown=inp.images_unknown,
        now=inp.now,
        gpu_pods={node_name(n): pods.get(node_name(n), ()) for n in nodes},
        node_pods={n: all_pods.get(n, ()) for n in {node_name(n) for n in nodes} if n in all_pods},
        signing_certificates=inp.signing_certificates,
        live_reports=_live_reports(inp),
    )


def _live_reports(inp: RolloutPlanInput) -> dict[str, LiveReport]:
    """Each node's fresh, connected agent report and its boot, as the coordinator's registry
    gives them (a node whose GPU serves nothing starts first: rollout/input/driverless.py)."""
    out = {}
    for facts in inp.nodes:
        view = facts.view
        if view is not None and view.report is not None and _not_fresh(view) == "":
            out[facts.name] = (view.boot_id, view.report)
    return out


def plan_rollout(inp: RolloutPlanInput) -> RolloutPlan:
    """Every node KMM would touch, in the coordinator's order, with what it does first."""
    setup = pass_setup(inp.driver, inp.drivers or [inp.driver])
    target = target_of(inp.driver, inp.module)
    if inp.module is not None and setup.target is not None:
        target = dataclasses.replace(target, version=setup.target)
    reads, answers = _reads(inp, setup), _answers(inp)
    run = dry_run(reads, answers)
    turn = at_their_turn(reads, answers) if _any_waits_its_turn(run) else run
    touched: dict[str, tuple[ClusterNode, Touch]] = {}
    for facts in inp.nodes:
        fresh = facts.view.report if facts.view is not None and not _not_fresh(facts.view) else None
        found = touch(target, facts.node, fresh)
        if found is not None:
            touched[facts.name] = (facts, found)
    live = _live_reports(inp)
    order = start_order(
        {name: _unavailable(facts.node, live.get(name)) for name, (facts, _) in touched.items()}
    )
    ref = module_ref(inp.driver)
    refusal = setup.refusal or ("" if setup.settings is not None else "spec.rollout unreadable")
    return RolloutPlan(
        driver=target.driver,
        module="/".join(ref) if ref is not None else "",
        version=target.version,
        nodes=tuple(_planned(run, turn, *touched[name], refusal) for name in order),
        claims_unknown=inp.claims_unknown,
        gate=_rollout_hold(run),
        refusal=refusal,
        images_unknown=inp.images_unknown,
    )


def _rollout_hold(run: DryRun) -> str:
    status = run.decision.status or {}
    return str(status.get("message") or "") if status.get("holdKind") else ""


def _unavailable(node: Mapping[str, Any], live: LiveReport | None) -> bool:
    """The node already counts against maxUnavailable, as the coordinator counts it."""
    labels = node_labels(node)
    phase = parse_phase(labels.get(names.STATE_LABEL))
    if phase not in IN_PROGRESS:
        opted_out = labels.get(names.OPT_OUT_LABEL) == names.OPT_OUT_VALUE
        phase = Phase.SKIPPED if opted_out else None
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    ready, driverless = node_is_ready(node), node_driverless(node, live)
    return is_unavailable(phase, unschedulable=unschedulable, ready=ready, driverless=driverless)


# Waits that pass by themselves: the plan also shows where the node's checks take it then.
_TURN_WAITS = (WaitKind.HELD, WaitKind.MAX_UNAVAILABLE, WaitKind.GATE_NOT_ASKED)


def _waits_its_turn(node_run: NodeRun) -> bool:
    wait = node_run.move.wait
    return wait is not None and wait.kind in _TURN_WAITS


def _any_waits_its_turn(run: DryRun) -> bool:
    return any(_waits_its_turn(node_run) for node_run in run.nodes.values())


def _planned(
    run: DryRun, turn: DryRun, facts: ClusterNode, found: Touch, refusal: str
) -> PlannedNode:
    annotations = (facts.node.get("metadata") or {}).get("annotations") or {}
    state = node_labels(facts.node).get(names.STATE_LABEL, "")
    state_version = annotations.get(names.STATE_VERSION, "")
    now = f"{state} ({state_version})" if state and state_version else state or "-"
    node_run = run.nodes.get(facts.name)
    if found.action is TouchKind.NONE:
        return PlannedNode(facts.name, found.action, found.change, "-", "done", DONE, now)
    if node_run is None:
        why = f"the rollout is refused ({refusal}): nothing starts" if refusal else "not rolled"
        return PlannedNode(facts.name, found.action, found.change, "-", "wait", (why,), now)
    verdict, reasons = _verdict(run, node_run, facts)
    at_turn = turn.nodes.get(facts.name)
    if _waits_its_turn(node_run) and at_turn is not None and at_turn.move.kind in _MOVING:
        then, then_reasons = _followed(turn, at_turn, facts)
        verdict = "blocked" if then == "blocked" else verdict
        reasons = (*reasons, "at its turn: " + "; ".join(then_reasons))
    next_words = _next_words(node_run)
    return PlannedNode(
        facts.name, found.action, found.change, next_words, verdict, reasons, now, node_run.move
    )


def _next_words(node_run: NodeRun) -> str:
    move = node_run.move
    words = {
        MoveKind.START: "start",
        MoveKind.LEAVE: "leave",
        MoveKind.STAY: "-",
    }.get(move.kind, "")
    if move.kind is MoveKind.WAIT and move.wait is not None:
        words = f"wait ({move.wait.kind.value})"
    elif move.kind is MoveKind.STEP:
        words = f"step ({move.phase_to.value})" if move.phase_to is not None else "step"
    placed = ", ".join(phase.value for phase in node_run.placed)
    return f"{placed}, then {words}" if placed and words != "-" else placed or words


Verdict = tuple[str, tuple[str, ...]]
_MOVING = (MoveKind.START, MoveKind.STEP)


def _verdict(run: DryRun, node_run: NodeRun, facts: ClusterNode) -> Verdict:
    move = node_run.move
    if move.kind is MoveKind.WAIT and move.wait is not None:
        return _waiting(move.wait)
    if move.kind is MoveKind.LEAVE:
        return "go", ("leaves the rollout: nothing of this GPUDriver is loaded here",)
    if move.kind in _MOVING:
        return _followed(run, node_run, facts)
    return _stays(node_run, facts)


def _waiting(wait: Wait) -> Verdict:
    if wait.kind in (WaitKind.BLOCKED, WaitKind.NODE_NOT_READY):
        return "blocked", (wait.words,)
    if wait.kind is WaitKind.GATE_NOT_ASKED:
        return "wait", (GATE_NOT_ASKED,)
    if wait.hold is not None:
        # The plan's headline gives the hold's words once.
        return "wait", (f"held ({wait.hold.kind.value})",)
    return "wait", (wait.words,)


def _stays(node_run: NodeRun, facts: ClusterNode) -> Verdict:
    labels = node_labels(facts.node)
    annotations = (facts.node.get("metadata") or {}).get("annotations") or {}
    phase = node_run.placed[-1] if node_run.placed else parse_phase(labels.get(names.STATE_LABEL))
    if phase is Phase.SKIPPED:
        return "skip", (f"opted out ({names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}): left alone",)
    if phase is Phase.DONE:
        return "done", DONE
    if phase is Phase.FAILED:
        why = annotations.get(names.REASON, "") or "no reason recorded"
        retry = f"gpuctl rollout retry --node {facts.name}"
        return "blocked", (f"Failed: {why}; fix it, then `{retry}`",)
    if phase in IN_PROGRESS:
        return "go", (f"under way: {phase.value}",)
    return "wait", ("nothing moves it in this pass",)


def _followed(run: DryRun, node_run: NodeRun, facts: ClusterNode) -> Verdict:
    """Where the node's checks take it, on its agent's latest report."""
    start = node_run.move.phase_to
    last = node_run.then[-1] if node_run.then else start
    starts = node_run.move.kind is MoveKind.START
    if last in (Phase.BLOCKED, Phase.FAILED):
        lead = "starts, then its check blocks it" if starts else f"{last.value}"
        return "blocked", (f"{lead}: {node_run.reason or 'no reason recorded'}",)
    waits = _image_waits(run, facts) if last is Phase.CHECKING else None
    if waits is not None:
        return waits
    if last is Phase.CHECKING and not _reported(run, facts.name):
        why = _not_fresh(facts.view)
        return "blocked", (f"no fresh agent report ({why}): the check waits for one, then blocks",)
    pausing = _pause_note(run, facts.name)
    if last is Phase.DRAINING and not node_run.evicts and not pausing:
        return _drain_waits(run, facts)
    notes = list(_preparation_notes(run, facts))
    if node_run.evicts:
        notes.insert(0, "would evict GPU pods: " + ", ".join(str(p) for p in node_run.evicts))
    probing = [note for note in (_probe_note(run, facts.name),) if note]
    notes[:0] = [*probing, *pausing]
    if last in (Phase.PREPARING, Phase.DRAINING):
        return "go", tuple(notes or ["nothing blocks"])
    phase = last or parse_phase(node_labels(facts.node).get(names.STATE_LABEL))
    return "go", (f"under way: {phase.value if phase is not None else 'in a step'}", *notes)


def _pause_note(run: DryRun, name: str) -> tuple[str, ...]:
    """The node's GPU daemons its step would pause (rollout.pause), in words (() for none)."""
    node = _in_run(run, name)
    pods = pausable_on_node(run.inp, node) if node is not None else ()
    if not pods:
        return ()
    named = ", ".join(f"{p} ({p.owner})" if p.owner else str(p) for p in pods)
    return (f"would pause ({names.DRIVER_READY_LABEL} off until verified): {named}",)


def _drain_waits(run: DryRun, facts: ClusterNode) -> Verdict:
    """A drain that does not finish by itself: GPU pods (eviction off) or claims."""
    pods = ", ".join(str(p) for p in facts.gpu_pods)
    if pods:
        held = _report_blockers(run, facts)
        also = (f"then the agent's check, unless the pods are what holds it: {held}",)
        return "wait", (f"GPU pods must finish (evictGPUPods is off): {pods}", *also[: bool(held)])
    claims = _claims_of(run, facts.name)
    if claims:
        return "blocked", tuple(f"allocated GPU ResourceClaim {c}" for c in claims)
    return "wait", ("waits at the drain",)


def _report_blockers(run: DryRun, facts: ClusterNode) -> str:
    """What the node's report says blocks the unload, in the agent's words ("" for none)."""
    view = facts.view
    if view is None or view.report is None or _not_fresh(view):
        return ""
    return "; ".join(unload_verdict(view.report, run.inp.unload_settings).messages())


def _in_run(run: DryRun, name: str) -> RolloutNode | None:
    """The node as the run's first pass saw it (None: not in the rollout)."""
    return next((node for node in run.inp.nodes if node.name == name), None)


def _image_waits(run: DryRun, facts: ClusterNode) -> Verdict | None:
    """A check that waits for KMM to find the reload's image, then blocks (None: it does
    not)."""
    no_image = _image_not_ready(run, facts.name)
    if no_image is None:
        return None
    return "blocked", (f"starts, then its check waits for KMM, then blocks: {no_image}",)


def _probe_note(run: DryRun, name: str) -> str:
    """What the node's check proves of its reload's image first
    (gpuctl/rollout/step/kernel_proof.py: a probe Pod on the node copies the kernel's modules out of
    it, as KMM's loader will); "" when its
    check needs no proof."""
    node = _in_run(run, name)
    if node is None or not needs_proof(run.inp, node):
        return ""
    folder = modules_folder(kmm_kernel(node))
    return (
        f"its check first proves that image {node.target_image} holds {folder} (KMM's copy, "
        "run in a probe Pod on the node): a copy that fails blocks it (image-lacks-kernel)"
    )


def _image_not_ready(run: DryRun, name: str) -> str | None:
    """Why KMM's image keeps the node's check from going on, in words (None: it does not)."""
    node = _in_run(run, name)
    block = image_not_ready(run.inp, node) if node is not None else None
    return block.words if block is not None else None


def _reported(run: DryRun, name: str) -> bool:
    """The node's agent report stood as its check's answer."""
    node = _in_run(run, name)
    return node is not None and INSPECT in node.calls


def _claims_of(run: DryRun, name: str) -> tuple[str, ...]:
    node = _in_run(run, name)
    return node.claims if node is not None else ()


def _preparation_notes(run: DryRun, facts: ClusterNode) -> tuple[str, ...]:
    """What preparing the node would change (the unload rule's notes on its report)."""
    view = facts.view
    if view is None or view.report is None or _not_fresh(view):
        return ()
    return unload_verdict(view.report, run.inp.unload_settings).notes


def render_plan(plan: RolloutPlan) -> str:
    lines = [_headline(plan)]
    if plan.refusal:
        lines.append(
            f"The rollout is refused: {plan.refusal}. Nodes mid-step finish it; none starts."
        )
    elif plan.gate:
        lines.append(f"No node starts now: {plan.gate}.")
    if plan.images_unknown:
        lines.append(
            f"KMM's ModuleImagesConfig could not be read: {plan.images_unknown}. No image counts "
            "as found: a reload waits for KMM to find its image."
        )
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
    for node, position in zip(plan.nodes, positions(plan), strict=True):
        rows.append(
            [
                "-" if position is None else str(position),
                node.name,
                node.now,
                node.action.value,
                node.change,
                node.next,
                node.verdict,
                "; ".join(node.reasons),
            ]
        )
    headers = ["ORDER", "NODE", "NOW", "ACTION", "CHANGE", "NEXT", "WOULD", "WHY"]
    return "\n".join(lines) + "\n" + format_table(headers, rows)


def positions(plan: RolloutPlan) -> list[int | None]:
    """Each node's turn in the coordinator's order (None: skipped or done, it takes none)."""
    out: list[int | None] = []
    order = 0
    for node in plan.nodes:
        if node.verdict in ("skip", "done"):
            out.append(None)
        else:
            order += 1
            out.append(order)
    return out


def plan_document(plan: RolloutPlan) -> dict[str, Any]:
    """`gpuctl rollout plan -o json|yaml`: the plan's table and headline as data; the field
    names are the table's columns (order, now, action, change, next, would, why)."""
    return {
        "gpudriver": plan.driver,
        "module": plan.module,
        "targetVersion": plan.version,
        "refused": plan.refusal,
        "heldBy": plan.gate,
        "claimsUnknown": plan.claims_unknown,
        "imagesUnknown": plan.images_unknown,
        "nodes": [
            {
                "order": position,
                "name": node.name,
                "now": node.now,
                "action": node.action.value,
                "change": node.change,
                "next": node.next,
                "would": node.verdict,
                "why": list(node.reasons),
            }
            for node, position in zip(plan.nodes, positions(plan), strict=True)
        ],
    }


def _headline(plan: RolloutPlan) -> str:
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


def _counts(plan: RolloutPlan) -> str:
    actions = Counter(node.action for node in plan.nodes)
    changing = [
        f"{actions[a]} {a.value}"
        for a in (TouchKind.LOAD, TouchKind.RELOAD, TouchKind.UNLOAD)
        if actions[a]
    ]
    words = f"KMM would touch {len(plan.nodes) - actions[TouchKind.NONE]} node(s)"
    words += f": {', '.join(changing)}" if changing else ""
    if actions[TouchKind.NONE]:
        words += f"; {actions[TouchKind.NONE]} at the target already"
    return words + ". In the coordinator's order:"
