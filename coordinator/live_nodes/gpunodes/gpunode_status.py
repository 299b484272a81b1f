"""The GPUNode status the coordinator wants for a node, and the patch that gets it there.

Pure functions. `desired_status` turns a NodeRecord and its freshness verdict
(coordinator/live_nodes/streams/freshness.py) into the status shape of gpuctl/crds/gpunode.py;
`status_patch` compares it with what the API server holds and returns only what changed —
`report.observedAt` (and so `reportReceivedAt`) alone is no change, so periodic rescans that find
nothing new never write, and the Fresh condition changes only when its status or reason does (its
message, which gives the agent's silence at the moment it went stale, and its lastTransitionTime are
kept otherwise). Nothing known is ever erased: a record without a report (e.g. after a coordinator
restart, before the agent reconnects) leaves the stored report alone, but says the node's state is
unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.protobuf.json_format import MessageToDict

from coordinator.live_nodes.streams.freshness import Freshness
from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import timestamps
from gpuctl.common.merge_patch import merge_patch_to
from gpuctl.common.names import GPUNODE_FRESH, UNKNOWN_BLOCKERS, FreshReason
from gpuctl.common.unload_rule import module_state_name

SRCVERSION_PREFIX = 12
# Keys of the report's content: a change in any other key alone is not worth a write.
_VOLATILE_REPORT_KEYS = frozenset({"observedAt"})


def module_word(report: report_pb.NodeReport) -> str:
    """Backport tag, else version, else srcversion prefix, else the module's state."""
    if not report.HasField("module"):
        return "unknown"
    module = report.module
    if module.backport_tag:
        return module.backport_tag
    if module.version:
        return module.version
    if module.srcversion:
        return module.srcversion[:SRCVERSION_PREFIX]
    if module.state == report_pb.Module.STATE_UNSPECIFIED:
        return "unknown"
    return module_state_name(module.state).lower().replace("_", " ")


def summary(report: report_pb.NodeReport) -> dict[str, Any]:
    return {
        "gpus": sum(1 for d in report.devices if d.role != report_pb.Device.VIRTUAL),
        "drivers": sorted({d.driver for d in report.devices if d.driver}),
        "module": module_word(report),
        "blockers": len(report.blockers),
        "atBoot": at_boot_word(report),
    }


_AT_BOOT = {
    report_pb.InTreeAutoload.NO_IN_TREE_MODULE: "NoInTreeModule",
    report_pb.InTreeAutoload.BLACKLISTED: "Blacklisted",
    report_pb.InTreeAutoload.AUTOLOADS: "Autoloads",
    report_pb.InTreeAutoload.DISABLED: "Disabled",
}


def at_boot_word(report: report_pb.NodeReport) -> str:
    """What the next boot does with the in-tree xe, in one word (Unknown when not reported)."""
    return _AT_BOOT.get(report.in_tree_autoload.state, "Unknown")


def report_json(report: report_pb.NodeReport) -> dict[str, Any]:
    """proto3 JSON, lowerCamelCase, default-valued fields left out (as `-o json` prints)."""
    return MessageToDict(report)


def fresh_message(verdict: Freshness, bound_seconds: float) -> str:
    if verdict.fresh:
        return (
            f"the agent was heard from within the {bound_seconds:g}s freshness bound and "
            "the report is its latest"
        )
    if verdict.reason is FreshReason.NO_HEARTBEAT and verdict.silent_seconds is not None:
        return (
            f"no heartbeat or report from the agent for {verdict.silent_seconds:.1f}s (the "
            f"freshness bound is {bound_seconds:g}s): the node's state is unknown"
        )
    return f"{verdict.why}: the node's state is unknown"


def fresh_condition(verdict: Freshness, bound_seconds: float, at: datetime) -> dict[str, Any]:
    """The Fresh condition; `at` becomes its lastTransitionTime if its status changes."""
    return {
        "type": GPUNODE_FRESH,
        "status": "True" if verdict.fresh else "False",
        "reason": verdict.reason.value,
        "message": fresh_message(verdict, bound_seconds),
        "lastTransitionTime": timestamps.format_microseconds(at),
    }


def unload_blockers(record: NodeRecord | None, verdict: Freshness) -> str:
    """The blockers the coordinator counts now: the report's, or unknown if it is not fresh."""
    if record is None or record.report is None or not verdict.fresh:
        return UNKNOWN_BLOCKERS
    return str(len(record.report.blockers))


def desired_status(
    record: NodeRecord | None, verdict: Freshness, bound_seconds: float, at: datetime
) -> dict[str, Any]:
    """The status for `record` judged `verdict` at wall time `at`; None values mean "remove"
    (merge-patch semantics)."""
    freshness = {
        "conditions": [fresh_condition(verdict, bound_seconds, at)],
        "unloadBlockers": unload_blockers(record, verdict),
    }
    if record is None:
        return {"session": Session.DISCONNECTED.value, **freshness}
    status: dict[str, Any] = {"session": record.session.value, **freshness}
    if record.agent_version:
        status["agentVersion"] = record.agent_version
    if record.boot_id:
        status["bootId"] = record.boot_id
    if record.report is not None:
        status["summary"] = summary(record.report)
        status["report"] = report_json(record.report)
        if record.report_received_at is not None:
            status["reportReceivedAt"] = timestamps.format_microseconds(record.report_received_at)
    if record.answered_request:
        status["answeredInspectRequest"] = record.answered_request
        status["inspectError"] = record.inspect_error or None
    return status


def _content(report: Any) -> Any:
    if not isinstance(report, Mapping):
        return report
    return {k: v for k, v in report.items() if k not in _VOLATILE_REPORT_KEYS}


def merge_conditions(current: Any, desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`desired`, keeping what is stored of a condition whose status and reason are unchanged,
    and its lastTransitionTime while its status is."""
    stored = {
        c.get("type"): c
        for c in (current if isinstance(current, list) else [])
        if isinstance(c, dict)
    }
    merged: list[dict[str, Any]] = []
    for condition in desired:
        old = stored.get(condition["type"])
        if old is None or old.get("status") != condition["status"]:
            merged.append(condition)
        elif old.get("reason") == condition["reason"]:
            merged.append(dict(old))
        else:
            since = old.get("lastTransitionTime") or condition["lastTransitionTime"]
            merged.append({**condition, "lastTransitionTime": since})
    return merged


def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch from `current` to `desired` ({} when nothing worth writing changed)."""
    patch: dict[str, Any] = {}
    desired = dict(desired)
    if "conditions" in desired:
        desired["conditions"] = merge_conditions(current.get("conditions"), desired["conditions"])
    for key, value in desired.items():
        if key in ("report", "reportReceivedAt"):
            continue
        if value is None:
            if current.get(key) is not None:
                patch[key] = None
        elif current.get(key) != value:
            patch[key] = merge_patch_to(current.get(key), value)
    if "report" in desired and (
        _content(current.get("report")) != _content(desired["report"])
        or "answeredInspectRequest" in patch
    ):
        patch["report"] = merge_patch_to(current.get("report"), desired["report"])
        if "reportReceivedAt" in desired:
            patch["reportReceivedAt"] = desired["reportReceivedAt"]
    return patch
