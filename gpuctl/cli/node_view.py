"""What the CLI knows about one remote node, whichever way it was read (API or coordinator).

Pure data and conversions: a GPUNode object (as the Kubernetes API returns it) or a
NodeService `NodeState` becomes a `NodeView`. A report that cannot be parsed is kept as a
problem to show, not an exception, so one bad object never hides the other nodes. Whether the
report is still the truth is the coordinator's call, never the CLI's: the GPUNode's Fresh
condition (False: `stale`, its message the problem) or NodeService's `fresh`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.api.v1alpha1 import node_service_pb2 as service_pb
from gpuctl.common import timestamps
from gpuctl.common.names import GPUNODE_FRESH


@dataclass(frozen=True)
class NodeView:
    name: str
    # True connected, False disconnected, None never heard of.
    connected: bool | None
    report: pb.NodeReport | None
    # How long ago the report was received; None without a report.
    age: datetime.timedelta | None
    agent_version: str = ""
    # Why the report is missing or not to be trusted, in words; empty when all is well.
    problem: str = ""
    # The coordinator no longer counts the report (silent agent, a report it lacks, ...).
    stale: bool = False
    # The boot the agent's stream was opened in (GPUNode status.bootId; "" unknown).
    boot_id: str = ""


def fresh_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The GPUNode's Fresh condition; None from a coordinator that wrote none."""
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == GPUNODE_FRESH:
            return condition
    return None


def from_gpunode(obj: Mapping[str, Any], now: datetime.datetime) -> NodeView:
    """A GPUNode object (`status` written by the coordinator) as a NodeView."""
    name = str(obj.get("metadata", {}).get("name", ""))
    status = obj.get("status") or {}
    session = status.get("session")
    connected = {"Connected": True, "Disconnected": False}.get(session) if session else None
    report: pb.NodeReport | None = None
    problem = ""
    raw_report = status.get("report")
    if isinstance(raw_report, Mapping):
        report = pb.NodeReport()
        try:
            json_format.ParseDict(dict(raw_report), report, ignore_unknown_fields=True)
        except json_format.ParseError as error:
            report, problem = None, f"the stored report cannot be read: {error}"
    elif raw_report is not None:
        problem = "the stored report is not an object"
    received = timestamps.parse_or_none(status.get("reportReceivedAt"))
    age = now - received if received is not None and report is not None else None
    fresh = fresh_condition(status) or {}
    stale = bool(fresh) and fresh.get("status") != "True"
    if report is None and not problem:
        problem = "no report received yet"
    elif stale and not problem:
        problem = str(fresh.get("message") or fresh.get("reason") or "the report is not fresh")
    return NodeView(
        name=name,
        connected=connected,
        report=report,
        age=age,
        agent_version=str(status.get("agentVersion", "")),
        problem=problem,
        stale=stale and report is not None,
        boot_id=str(status.get("bootId") or ""),
    )


def from_node_state(state: service_pb.NodeState) -> NodeView:
    """A NodeService answer as a NodeView; the coordinator computed the age itself."""
    has_report = state.HasField("report")
    connected = {
        service_pb.NodeState.CONNECTED: True,
        service_pb.NodeState.DISCONNECTED: False,
    }.get(state.session)
    problem = ""
    if not has_report:
        problem = "no report received yet"
    elif not state.fresh:
        problem = "the report is older than the coordinator's freshness bound"
    return NodeView(
        name=state.node_name,
        connected=connected,
        report=state.report if has_report else None,
        age=state.age.ToTimedelta() if has_report and state.HasField("age") else None,
        agent_version=state.agent_version,
        problem=problem,
        stale=has_report and not state.fresh,
    )
