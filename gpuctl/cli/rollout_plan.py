"""`gpuctl rollout plan`: the order nodes would go in and what would stop each right now.

Pure: per-node facts in (labels, cordon, readiness, the agent's latest report, GPU pods,
allocated GPU ResourceClaims), one verdict per node out, in the order the coordinator starts
nodes (gpuctl.common.rollout_order). It answers the questions the coordinator's check and
prepare steps ask, with the same unload rule (gpuctl.common.unload_rule), from the same facts
an admin can read through the API:
- skip     the node opted out (label gpuctl.dev/rollout=skip);
- done     the node is already Done at the target version;
- go       nothing stops it (notes say what preparation would change);
- wait     GPU pods must finish first (eviction is off);
- blocked  a person must act: busy devices, claims, no fresh agent report, NotReady.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuctl.cli.node_view import NodeView
from gpuctl.cli.table import format_table
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase, parse_phase
from gpuctl.common.rollout_order import is_unavailable, start_order
from gpuctl.common.unload_rule import UnloadSettings, UnloadVerdict, unload_verdict


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


@dataclass(frozen=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # True Ready, False NotReady, None unknown.
    ready: bool | None = True
    # Cordoned (spec.unschedulable), by anyone.
    unschedulable: bool = False
    view: NodeView | None = None
    gpu_pods: Sequence[str] = ()
    claims: Sequence[str] = ()


@dataclass(frozen=True)
class PlannedNode:
    name: str
    verdict: str
    reasons: tuple[str, ...]
    now: str


def plan_rollout(
    target_version: str, settings: PlanSettings, nodes: Sequence[NodeFacts]
) -> list[PlannedNode]:
    """Every node in the coordinator's order, with its verdict and reasons."""
    by_name = {node.name: node for node in nodes}
    order = start_order({node.name: _unavailable(node) for node in nodes})
    return [_plan_node(target_version, settings, by_name[name]) for name in order]


def _unavailable(node: NodeFacts) -> bool:
    """The node already counts against maxUnavailable, as the coordinator counts it: with the
    phase the coordinator gives it (a step goes on; an opted-out node is Skipped; any other
    is not in a step)."""
    phase = parse_phase(node.labels.get(names.STATE_LABEL))
    if phase not in IN_PROGRESS:
        opted_out = node.labels.get(names.OPT_OUT_LABEL) == names.OPT_OUT_VALUE
        phase = Phase.SKIPPED if opted_out else None
    return is_unavailable(phase, unschedulable=node.unschedulable, ready=node.ready is True)


def _plan_node(target: str, settings: PlanSettings, node: NodeFacts) -> PlannedNode:
    state = node.labels.get(names.STATE_LABEL, "")
    state_version = node.annotations.get(names.STATE_VERSION, "")
    now = f"{state} ({state_version})" if state and state_version else state or "-"
    if node.labels.get(names.OPT_OUT_LABEL) == names.OPT_OUT_VALUE:
        return PlannedNode(
            node.name, "skip", (f"opted out ({names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE})",), now
        )
    if state == "Done" and state_version == target:
        return PlannedNode(node.name, "done", (f"already on {target}",), now)
    blocked: list[str] = []
    notes: list[str] = []
    if node.ready is not True:
        blocked.append("node is NotReady" if node.ready is False else "node readiness unknown")
    blocked += [f"allocated GPU ResourceClaim {claim}" for claim in node.claims]
    verdict = _agent_verdict(node.view, settings)
    blocked += verdict.messages()
    notes += verdict.notes
    waiting: list[str] = []
    if node.gpu_pods:
        pods = ", ".join(node.gpu_pods)
        if settings.evict_gpu_pods:
            notes.append(f"would evict GPU pods: {pods}")
        else:
            waiting.append(f"GPU pods must finish (evictGPUPods is off): {pods}")
    if blocked:
        return PlannedNode(node.name, "blocked", tuple(blocked + waiting), now)
    if waiting:
        return PlannedNode(node.name, "wait", tuple(waiting), now)
    return PlannedNode(node.name, "go", tuple(notes) or ("nothing blocks",), now)


def _agent_verdict(view: NodeView | None, settings: PlanSettings) -> UnloadVerdict:
    """The unload rule's verdict on the node's latest report; unknown unless it is fresh."""
    if view is None:
        return unload_verdict(None, settings.unload)
    not_fresh = view.problem
    if not not_fresh and view.connected is not True:
        not_fresh = "agent disconnected"
    return unload_verdict(view.report, settings.unload, not_fresh=not_fresh)


def render_plan(name: str, target: str, planned: Sequence[PlannedNode]) -> str:
    head = f"Plan for {name} to {target}: {len(planned)} targeted nodes, in this order\n"
    if not planned:
        return head + "No node matches the Module's selector.\n"
    rows = []
    order = 0
    for node in planned:
        position = "-"
        if node.verdict not in ("skip", "done"):
            order += 1
            position = str(order)
        rows.append([position, node.name, node.now, node.verdict, "; ".join(node.reasons)])
    return head + format_table(["ORDER", "NODE", "NOW", "WOULD", "WHY"], rows)
