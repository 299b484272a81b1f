"""The wire (gpuctl/api/v1alpha1) across releases, both ways: a report a 0.1.0 agent sent, and
the Welcome and requests a 0.1.0 coordinator sent, read the same in this build; a newer peer's
fields this build does not know are skipped, the known ones kept
(docs/deploying.md#version-skew). The bytes are the old peer's, not re-encoded by this build."""

from __future__ import annotations

import json

from google.protobuf import json_format

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from tests.support.wire import (
    FUTURE_FIELD,
    GOLDEN,
    field,
    golden_coordinator_messages,
    golden_report,
    newer_coordinator_message,
    number_of,
)

FUTURE_DEVICE_FIELD = FUTURE_FIELD + 1


def as_read(data: bytes) -> dict[str, object]:
    return json_format.MessageToDict(report_pb.NodeReport.FromString(data))


def test_a_0_1_0_agents_report_reads_as_it_was_sent() -> None:
    sent = json.loads((GOLDEN / "node_report-0.1.0.json").read_text())
    assert as_read(golden_report("0.1.0")) == sent, (
        "a 0.1.0 agent's report reads differently in this build: a field of proto/ was "
        "renumbered, retyped or removed (the wire only gains fields)"
    )


def test_a_newer_agents_unknown_fields_are_skipped_and_the_rest_kept() -> None:
    address = field(number_of(report_pb.Device, "pci_address"), b"0000:04:00.0")
    device = address + field(FUTURE_DEVICE_FIELD, b"a newer agent's device detail")
    newer = (
        golden_report("0.1.0")
        + field(FUTURE_FIELD, b"a newer agent's whole-node fact")
        + field(FUTURE_FIELD + 1, 12345)
        # Repeated fields append: one more device, whose fields are partly unknown.
        + field(number_of(report_pb.NodeReport, "devices"), device)
    )
    read = report_pb.NodeReport.FromString(newer)
    sent = json.loads((GOLDEN / "node_report-0.1.0.json").read_text())
    known = json_format.MessageToDict(read)
    assert known["devices"][:-1] == sent["devices"]
    assert known["devices"][-1]["pciAddress"] == "0000:04:00.0"
    assert {k: v for k, v in known.items() if k != "devices"} == {
        k: v for k, v in sent.items() if k != "devices"
    }


def test_a_0_1_0_coordinators_messages_read_as_they_were_sent() -> None:
    golden = golden_coordinator_messages("0.1.0")
    kinds = {f.name for f in agent_pb.CoordinatorMessage.DESCRIPTOR.oneofs_by_name["body"].fields}
    assert set(golden) == kinds, "every kind of CoordinatorMessage has its golden"
    for kind, (wire, sent) in golden.items():
        read = json_format.MessageToDict(agent_pb.CoordinatorMessage.FromString(wire))
        assert read == sent, (
            f"a 0.1.0 coordinator's {kind} reads differently in this build: a field of proto/ "
            "was renumbered, retyped or removed (the wire only gains fields)"
        )


def test_a_newer_coordinators_unknown_fields_are_skipped_and_the_rest_kept() -> None:
    for kind, (_, sent) in golden_coordinator_messages("0.1.0").items():
        read = agent_pb.CoordinatorMessage.FromString(newer_coordinator_message(kind))
        assert read.WhichOneof("body") == kind
        assert json_format.MessageToDict(read) == sent, kind
