"""Protobuf wire bytes written by hand, for skew tests: a peer of another gpuctl release is
played by bytes, not by this build's classes (which would only ever write this build's
schema). Plus the golden report a 0.1.0 agent sent (tests/golden/wire/)."""

from __future__ import annotations

import base64
from pathlib import Path

from google.protobuf.message import Message

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
