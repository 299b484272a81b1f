"""`gpuctl rollout plan`: the order nodes would go in and what would stop each right now.

Pure: per-node facts in (labels, readiness, the agent's latest report, GPU pods, allocated GPU
ResourceClaims), one verdict per node out. It answers the questions the coordinator's check
and prepare steps ask, from the same facts an admin can read through the API:
- skip     the node opted out (label gpuctl.dev/rollout=skip);
- done     the node is already Done at the target version;
- go       nothing stops it (notes say what preparation would change);
- wait     GPU pods must finish first (eviction is off);
- blocked  a person must act: busy devices, claims, no fresh agent report, NotReady.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.table import format_table
from gpuctl.common import names
from gpuctl.common.module_holders import holders_unloaded_with
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS

Reason = pb.Blocker.Reason


@dataclass(frozen=True)
class PlanSettings:
    evict_gpu_pods: bool = False
    disable_idle_vfs: bool = False
    # Modules KMM unloads before the driver (modulesLoadingOrder after its first entry): their
    # holding the driver does not block.
    unloaded_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # True Ready, False NotReady, None unknown.
    ready: bool | None = True
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
    """Every node in the coordinator's order (by name), with its verdict and reasons."""
    return [
        _plan_node(target_version, settings, node) for node in sorted(nodes, key=lambda n: n.name)
    ]


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
    blocked += _agent_blockers(node.view, settings, notes)
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


def _agent_blockers(view: NodeView | None, settings: PlanSettings, notes: list[str]) -> list[str]:
    if view is None or view.report is None:
        return ["no report from the node's agent: unknown is never safe"]
    if view.connected is not True or view.problem:
        return [f"the agent's report is not fresh ({view.problem or 'agent disconnected'})"]
    report = view.report
    found: list[str] = []
    holders = list(report.module.holders)
    for blocker in report.blockers:
        if blocker.reason == Reason.ACTIVE_VFS and _vfs_can_be_disabled(report, blocker, settings):
            notes.append(f"would disable the idle VFs of {blocker.pci_address}, then restore them")
            continue
        if (
            blocker.reason == Reason.MODULE_HOLDERS
            and holders
            and not holders_unloaded_with(holders, settings.unloaded_with)
        ):
            notes.append(f"KMM unloads {', '.join(holders)} first (modulesLoadingOrder)")
            continue
        found.append(blocker.message)
    return found


def _vfs_can_be_disabled(
    report: pb.NodeReport, blocker: pb.Blocker, settings: PlanSettings
) -> bool:
    """Every VF of the PF is idle and on the host: none handed to a VM, none with clients."""
    if not settings.disable_idle_vfs:
        return False
    vfs = [
        d for d in report.devices if d.role == pb.Device.VIRTUAL and d.physfn == blocker.pci_address
    ]
    return all(vf.driver not in VM_PASSTHROUGH_DRIVERS and not vf.clients for vf in vfs)


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
