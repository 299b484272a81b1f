"""`gpuctl nodes`: one row per GPU node, from NodeViews. Pure: views in, text out.

A node whose agent is not connected, whose report is missing, or whose report the
coordinator no longer counts (stale: e.g. the agent's stream is open but it went silent)
shows its blockers as unknown: the last thing it said may no longer be true, and unknown is
never safe. A connected agent whose report is stale shows as "connected, stale".
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.durations import short_age
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.table import format_table
from gpuctl.common.unload_rule import module_state_name, reason_name

HEADERS = ("NODE", "GPUS", "DRIVERS", "MODULE", "BLOCKERS", "REPORT AGE", "AGENT")
# -o wide: what the node runs, beside.
WIDE_HEADERS = (*HEADERS, "KERNEL", "AGENT VERSION")


def render_nodes(
    views: Sequence[NodeView], *, wide: bool = False, show_headers: bool = True
) -> str:
    if not views:
        return "No GPU nodes have reported yet.\n" if show_headers else ""
    ordered = sorted(views, key=lambda v: v.name)
    if not wide:
        return format_table(HEADERS, [_row(view) for view in ordered], show_headers=show_headers)
    rows = [
        [
            *_row(view),
            (view.report.kernel_release if view.report is not None else "") or "unknown",
            view.agent_version or "unknown",
        ]
        for view in ordered
    ]
    return format_table(WIDE_HEADERS, rows, show_headers=show_headers)


def _row(view: NodeView) -> list[str]:
    report = view.report
    agent = {True: "connected", False: "disconnected", None: "unknown"}[view.connected]
    if view.stale and view.connected is True:
        agent += ", stale"
    if report is None:
        return [view.name, "-", "-", "-", "unknown", short_age(view.age), agent]
    return [
        view.name,
        gpus_cell(report),
        ",".join(sorted({d.driver or "(none)" for d in report.devices})) or "-",
        module_cell(report.module),
        blockers_cell(report, trusted=view.connected is True and not view.problem),
        short_age(view.age),
        agent,
    ]


def gpus_cell(report: pb.NodeReport) -> str:
    vfs = sum(1 for d in report.devices if d.role == pb.Device.VIRTUAL)
    gpus = len(report.devices) - vfs
    return f"{gpus} (+{vfs} VF)" if vfs else str(gpus)


def module_cell(module: pb.Module) -> str:
    if module.state == pb.Module.NOT_LOADED:
        return "not loaded"
    if module.state == pb.Module.STATE_UNSPECIFIED:
        return "unknown"
    if module.state == pb.Module.BUILTIN:
        return "built-in"
    release = (
        module.backport_tag
        or module.version
        or (f"in-tree {module.srcversion[:8]}" if module.srcversion else "in-tree")
    )
    if module.state != pb.Module.LIVE:
        release += f" ({module_state_name(module.state).lower()})"
    return release


def blockers_cell(report: pb.NodeReport, *, trusted: bool) -> str:
    if not trusted:
        return "unknown"
    if not report.blockers:
        return "none"
    reasons = sorted({reason_name(b.reason) for b in report.blockers})
    return f"{len(report.blockers)}: " + ",".join(reasons)
