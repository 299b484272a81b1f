"""Fuzz the coordinator's handling of an AgentMessage, through the pure steps a stream runs it
through: parsing (agent_service._parse), the shape checks (limits), and for a report what
the registry, the GPUNode mirror and the rollout make of it (NodeRecord, the GPUNode status
as the JSON written to the API server, the rollout's ReportFacts, and the CLI's tables of it);
for a prepare or restore result, the rollout's facts. Bad input may only be refused (RefusalError,
InvalidMessageError): any other exception would end a stream with an internal error, or
worse, a mirror write or a rollout pass."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from coordinator.live_nodes.access.identity import RefusalError
from coordinator.live_nodes.gpunodes.gpunode_status import desired_status
from coordinator.live_nodes.streams.agent_service import _parse
from coordinator.live_nodes.streams.freshness import freshness
from coordinator.live_nodes.streams.limits import (
    InvalidMessageError,
    check_call_result,
    check_hello,
    check_report_update,
)
from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.cli.nodes_table import blockers_cell, gpus_cell, module_cell
from gpuctl.cli.report_table import render_report
from gpuctl.rollout.input.facts import prepare_facts, report_facts, restore_facts

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def _report() -> report_pb.NodeReport:
    report = report_pb.NodeReport(node_name="gpu-node-1", kernel_release="6.8.0")
    report.observed_at.FromDatetime(NOW)
    device = report.devices.add(pci_address="0000:03:00.0", driver="xe")
    device.clients.add(pid=4242, command="ollama", client_ids=[1], fd_count=2)
    report.blockers.add(reason=report_pb.Blocker.OPEN_CLIENTS, message="busy")
    return report


SEEDS = [
    agent_pb.AgentMessage(
        report=agent_pb.ReportUpdate(sequence=1, report=_report())
    ).SerializeToString(),
    agent_pb.AgentMessage(
        hello=agent_pb.Hello(node_name="gpu-node-1", agent_version="0.1.0")
    ).SerializeToString(),
    agent_pb.AgentMessage(
        prepare_result=agent_pb.PrepareResult(request_id="p-1", ready=True, report=_report())
    ).SerializeToString(),
    agent_pb.AgentMessage(
        restore_result=agent_pb.RestoreResult(request_id="r-1", report=_report())
    ).SerializeToString(),
]


def fuzz_one(data: bytes) -> None:
    try:
        handle(_parse(data))
    except (RefusalError, InvalidMessageError):
        return


def handle(message: agent_pb.AgentMessage) -> None:
    kind = message.WhichOneof("body")
    if kind == "hello":
        check_hello(message.hello)
    elif kind == "report":
        check_report_update(message.report)
        report = message.report.report
        record = NodeRecord(
            node=report.node_name,
            session=Session.CONNECTED,
            report=report,
            report_sequence=message.report.sequence,
            report_received_at=NOW,
            last_heard=0.0,
            in_sync=True,
        )
        status = desired_status(record, freshness(record, 0.0, 60.0), 60.0, NOW)
        json.dumps(status)
        report_facts(report)
        render_report(report)
        gpus_cell(report), module_cell(report.module), blockers_cell(report, trusted=True)
    elif kind == "prepare_result":
        check_call_result(message.prepare_result, kind)
        prepare_facts(message.prepare_result)
    elif kind == "restore_result":
        check_call_result(message.restore_result, kind)
        restore_facts(message.restore_result)
