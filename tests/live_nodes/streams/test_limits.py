"""What an agent may send: each refusal names the field and the bound."""

from __future__ import annotations

import pytest

from coordinator.live_nodes.streams.limits import (
    InvalidMessageError,
    check_hello,
    check_node_name,
    check_report_update,
)
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from testbed.agent_client import OPEN_CLIENTS, sample_report


def _update(**changes: object) -> agent_pb.ReportUpdate:
    update = agent_pb.ReportUpdate(report=sample_report("gpu-1", (OPEN_CLIENTS,)), sequence=1)
    for key, value in changes.items():
        setattr(update, key, value)
    return update


@pytest.mark.parametrize("name", ["gpu-1", "node.example.com", "a", "x" * 253])
def test_dns_subdomains_pass(name: str) -> None:
    check_node_name(name)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("", "empty"),
        ("Gpu-1", "not a DNS subdomain"),
        ("gpu_1", "not a DNS subdomain"),
        ("-gpu", "not a DNS subdomain"),
        ("gpu..1", "not a DNS subdomain"),
        ("x" * 254, "not a DNS subdomain"),
    ],
)
def test_other_names_are_refused(name: str, text: str) -> None:
    with pytest.raises(InvalidMessageError, match=text):
        check_node_name(name)


def test_hello_fields_are_bounded() -> None:
    check_hello(agent_pb.Hello(node_name="gpu-1", agent_version="1.0", boot_id="b"))
    with pytest.raises(InvalidMessageError, match=r"hello\.agent_version is 300 characters"):
        check_hello(agent_pb.Hello(node_name="gpu-1", agent_version="v" * 300))
    with pytest.raises(InvalidMessageError, match=r"hello\.boot_id contains non-printable"):
        check_hello(agent_pb.Hello(node_name="gpu-1", boot_id="a\nb"))


def test_a_real_report_passes() -> None:
    check_report_update(_update())


def test_report_update_shape() -> None:
    with pytest.raises(InvalidMessageError, match="without a report"):
        check_report_update(agent_pb.ReportUpdate(sequence=1))
    with pytest.raises(InvalidMessageError, match="sequence 0"):
        check_report_update(_update(sequence=0))
    with pytest.raises(InvalidMessageError, match="must carry the request_id"):
        check_report_update(_update(trigger=agent_pb.ReportUpdate.REQUESTED))


def test_thousands_of_devices_are_refused() -> None:
    update = _update()
    for index in range(1100):
        update.report.devices.add(pci_address=f"0000:00:{index:04x}")
    with pytest.raises(InvalidMessageError, match=r"report.devices has 1102 entries \(at most"):
        check_report_update(update)


def test_huge_strings_anywhere_are_refused() -> None:
    update = _update()
    update.report.devices[0].clients.add(pid=1, command="c" * 20_000)
    with pytest.raises(
        InvalidMessageError, match=r"report\.devices\.clients\.command is 20000 long"
    ):
        check_report_update(update)
    update = _update()
    update.report.module.parameters["k"] = "v" * 20_000
    with pytest.raises(InvalidMessageError, match=r"report\.module\.parameters"):
        check_report_update(update)


def test_the_report_must_name_a_valid_node() -> None:
    update = _update()
    update.report.node_name = "Not A Node"
    with pytest.raises(InvalidMessageError, match="not a DNS subdomain"):
        check_report_update(update)


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(2**62, 0), (-62_135_596_801, 0), (253_402_300_800, 0), (1_795_996_800, -5), (0, 10**9)],
)
def test_a_timestamp_outside_its_range_is_refused(seconds: int, nanos: int) -> None:
    """Found while writing the agent_message fuzz target: such a report passed the checks,
    then every GPUNode write of the node failed (no JSON exists for it) and the node's
    GPUNode stayed stale for as long as the agent kept sending it."""
    update = _update()
    update.report.observed_at.seconds = seconds
    update.report.observed_at.nanos = nanos
    with pytest.raises(InvalidMessageError, match=r"report.observed_at is not a valid Timestamp"):
        check_report_update(update)


@pytest.mark.parametrize(("seconds", "nanos"), [(0, 0), (-62_135_596_800, 0), (1, 999_999_999)])
def test_timestamps_in_range_pass(seconds: int, nanos: int) -> None:
    update = _update()
    update.report.observed_at.seconds = seconds
    update.report.observed_at.nanos = nanos
    check_report_update(update)
