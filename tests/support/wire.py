"""Protobuf wire bytes written by hand, for skew tests: a peer of another gpuctl release is
played by bytes, not by this build's classes (which would only ever write this build's
schema). Plus what a 0.1.0 agent and coordinator sent (tests/golden/wire/): the agent's report,
and the coordinator's Welcome and requests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf.message import Message

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wire"
VARINT, LENGTH_DELIMITED = 0, 2


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    """One field: an int as a varint, bytes as length-delimited (strings, messages)."""
    if isinstance(payload, int):
        return varint(number << 3 | VARINT) + varint(payload)
    return varint(number << 3 | LENGTH_DELIMITED) + varint(len(payload)) + payload


def number_of(message: type[Message], name: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number)


def golden_report(release: str = "0.1.0") -> bytes:
    """The NodeReport bytes an agent of `release` sent (from a fake host with open clients)."""
    return base64.decodebytes((GOLDEN / f"node_report-{release}.b64").read_bytes())


def golden_coordinator_messages(release: str = "0.1.0") -> dict[str, tuple[bytes, object]]:
    """The CoordinatorMessages a coordinator of `release` sent, by kind: (their bytes, what
    they said as protobuf JSON)."""
    document = json.loads((GOLDEN / f"coordinator_messages-{release}.json").read_text())
    return {
        kind: (base64.b64decode(entry["wire"]), entry["as_sent"])
        for kind, entry in document.items()
    }


# Field numbers no release uses yet: a newer peer's additions.
FUTURE_FIELD = 9001


def newer_coordinator_message(kind: str) -> bytes:
    """The 0.1.0 message of `kind` as a newer coordinator would send it: fields this build does
    not know both inside the body (embedded messages merge on the wire) and beside it."""
    wire, _ = golden_coordinator_messages("0.1.0")[kind]
    number = number_of(agent_pb.CoordinatorMessage, kind)
    inside = field(FUTURE_FIELD, b"a newer coordinator's option") + field(FUTURE_FIELD + 1, 3)
    return wire + field(number, inside) + field(FUTURE_FIELD, b"a newer envelope field")
