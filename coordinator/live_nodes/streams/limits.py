"""What an agent may send: sizes and shapes beyond which a message is refused as garbage.

Pure checks over parsed messages. A message outside these bounds is rejected with
INVALID_ARGUMENT on that stream only (the agent reconnects; other sessions never notice), so
the bounds are generous for any real node and only stop absurd or hostile input: thousands
of devices, megabyte strings, a node name that is not a DNS subdomain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb

# RFC 1123 subdomain, as Kubernetes requires of Node names.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_NODE_NAME = 253
MAX_SHORT_TEXT = 256  # agent version, boot id, request ids
# 8 physical functions x 63 VFs is the largest node known; twice that, and room to spare.
MAX_DEVICES = 1024
# Any other repeated or map field (clients, blockers, warnings, module parameters, ...).
MAX_REPEATED = 20_000
MAX_STRING = 16_384
MAX_DEPTH = 8
# The ranges google.protobuf.Timestamp and Duration define (0001-01-01 to 9999-12-31, and
# +-10,000 years): outside them no JSON or datetime exists, and the GPUNode mirror could
# never write the report.
_TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)
_DURATION_SECONDS = 315_576_000_000
_NANOS = 999_999_999


class InvalidMessageError(ValueError):
    """A message outside the bounds; the text says which field and why."""


@dataclass(frozen=True)
class Limits:
    max_devices: int = MAX_DEVICES
    max_repeated: int = MAX_REPEATED
    max_string: int = MAX_STRING


def check_node_name(name: str) -> None:
    if not name:
        raise InvalidMessageError("node_name is empty")
    if len(name) > MAX_NODE_NAME or not _DNS_SUBDOMAIN.match(name):
        raise InvalidMessageError(
            f"node_name {name[:64]!r} is not a DNS subdomain (lowercase letters, digits, '-' "
            f"and '.', at most {MAX_NODE_NAME} characters)"
        )


def check_short_text(field: str, value: str) -> None:
    if len(value) > MAX_SHORT_TEXT:
        raise InvalidMessageError(
            f"{field} is {len(value)} characters long (at most {MAX_SHORT_TEXT})"
        )
    if not value.isprintable():
        raise InvalidMessageError(f"{field} contains non-printable characters")


def check_hello(hello: agent_pb.Hello) -> None:
    check_node_name(hello.node_name)
    check_short_text("hello.agent_version", hello.agent_version)
    check_short_text("hello.boot_id", hello.boot_id)


def _check_fields(message: Message, where: str, limits: Limits, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidMessageError(f"{where} is nested too deeply")
    for field, value in message.ListFields():
        name = f"{where}.{field.name}"
        repeated = field.is_repeated
        values = list(value.values()) if repeated and isinstance(value, dict) else value
        if repeated:
            bound = limits.max_devices if name == "report.devices" else limits.max_repeated
            if len(values) > bound:
                raise InvalidMessageError(f"{name} has {len(values)} entries (at most {bound})")
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for key, item in value.items():
                    _check_scalar(f"{name}[{str(key)[:32]!r}]", key, limits)
                    _check_scalar(f"{name}[{str(key)[:32]!r}]", item, limits)
                continue
            for item in values:
                _check_value(name, item, limits, depth)
        else:
            _check_value(name, value, limits, depth)


def _check_scalar(name: str, value: object, limits: Limits) -> None:
    if isinstance(value, str | bytes) and len(value) > limits.max_string:
        raise InvalidMessageError(f"{name} is {len(value)} long (at most {limits.max_string})")


def _check_time(name: str, value: Timestamp | Duration) -> None:
    if isinstance(value, Timestamp):
        low, high = _TIMESTAMP_SECONDS
        valid = low <= value.seconds <= high and 0 <= value.nanos <= _NANOS
    else:
        same_sign = value.seconds * value.nanos >= 0
        valid = abs(value.seconds) <= _DURATION_SECONDS and abs(value.nanos) <= _NANOS
        valid = valid and same_sign
    if not valid:
        raise InvalidMessageError(
            f"{name} is not a valid {type(value).__name__} "
            f"(seconds {value.seconds}, nanos {value.nanos})"
        )


def _check_value(name: str, value: object, limits: Limits, depth: int) -> None:
    if isinstance(value, Timestamp | Duration):
        _check_time(name, value)
    elif isinstance(value, Message):
        _check_fields(value, name, limits, depth + 1)
    else:
        _check_scalar(name, value, limits)


def check_report_update(update: agent_pb.ReportUpdate, limits: Limits = Limits()) -> None:
    """Shape of one ReportUpdate; the node it names is checked by the session."""
    if not update.HasField("report"):
        raise InvalidMessageError("report update without a report")
    if update.sequence == 0:
        raise InvalidMessageError("report update with sequence 0 (sequences count from 1)")
    if update.trigger == agent_pb.ReportUpdate.REQUESTED and not update.request_id:
        raise InvalidMessageError("a REQUESTED report must carry the request_id it answers")
    check_short_text("report_update.request_id", update.request_id)
    check_node_name(update.report.node_name)
    _check_fields(update.report, "report", limits, 0)


def check_call_result(
    result: agent_pb.PrepareResult | agent_pb.RestoreResult, where: str, limits: Limits = Limits()
) -> None:
    """Shape of a PrepareResult or RestoreResult: an id, and bounded sizes throughout."""
    if not result.request_id:
        raise InvalidMessageError(f"{where} without the request_id it answers")
    check_short_text(f"{where}.request_id", result.request_id)
    if result.HasField("report"):
        check_node_name(result.report.node_name)
    _check_fields(result, where, limits, 0)
