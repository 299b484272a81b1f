"""xe's survivability mode per GPU function (agent/survivability.py, agent/pci.py): absent is
healthy, the file's type is reported, and what cannot be read is never taken as healthy."""

from __future__ import annotations

from pathlib import Path

from agent.hostfs import HostFiles
from agent.inspect import inspect_node
from agent.survivability import Survivability, SurvivabilityMode, parse_survivability
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import scenarios
from testbed.fakehost.host import FIXED_NOW
from testbed.fakehost.scenarios import B580

Mode = pb.Survivability.Mode


def test_the_type_line_decides_and_the_rest_are_details() -> None:
    text = "Survivability mode type: Runtime\nCapability Info: 0x1 - 0x2\n"
    assert parse_survivability(text) == Survivability(
        SurvivabilityMode.RUNTIME, ("Capability Info: 0x1 - 0x2",)
    )
    assert parse_survivability("Survivability mode type: Boot\n").mode is SurvivabilityMode.BOOT


def test_a_file_that_cannot_be_read_or_understood_is_survivability_of_unknown_type() -> None:
    assert parse_survivability(None).mode is SurvivabilityMode.TYPE_UNKNOWN
    assert parse_survivability("").mode is SurvivabilityMode.TYPE_UNKNOWN
    odd = parse_survivability("Survivability mode type: Sideways\n")
    assert odd.mode is SurvivabilityMode.TYPE_UNKNOWN
    garbage = parse_survivability("\x00\x01 not xe's words\n")
    assert garbage == Survivability(SurvivabilityMode.TYPE_UNKNOWN, ("\x00\x01 not xe's words",))


def test_a_healthy_device_says_none(tmp_path: Path) -> None:
    report = scenarios.arc_b580_in_tree(tmp_path).inspect()
    [device] = report.devices
    assert device.survivability.mode == Mode.NONE


def test_a_device_in_boot_survivability_is_reported_with_its_details(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.enter_survivability(B580, "Boot")
    [device] = host.inspect().devices
    assert device.survivability.mode == Mode.BOOT
    assert list(device.survivability.details) == [
        "Capability Info: 0x138344 - 0x1f",
        "Postcode Info: 0x138348 - 0x5",
    ]
    assert device.driver == "xe"  # bound all the same: the binding alone looks healthy


def test_an_unreadable_file_is_survivability_of_unknown_type_with_a_warning(
    tmp_path: Path,
) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.enter_survivability(B580, "Runtime")
    host.deny(f"{host.device_dir(B580)}/survivability_mode")
    report = host.inspect()
    assert report.devices[0].survivability.mode == Mode.TYPE_UNKNOWN
    assert any(w.path.endswith("survivability_mode") for w in report.warnings)


class DeviceDirectoryUnlistable(HostFiles):
    """HostFiles whose listing of one device's directory fails; its files read as ever."""

    def list_dir(self, relative: str) -> list[str]:
        if relative == f"sys/bus/pci/devices/{B580}":
            raise PermissionError(13, "Permission denied", relative)
        return super().list_dir(relative)


def test_a_device_directory_that_cannot_be_listed_is_unknown_not_healthy(tmp_path: Path) -> None:
    scenarios.arc_b580_in_tree(tmp_path)
    report = inspect_node(
        tmp_path, node_name="n", now=FIXED_NOW, files=DeviceDirectoryUnlistable(tmp_path)
    )
    [device] = report.devices
    assert not device.HasField("survivability")
    assert device.survivability.mode == Mode.MODE_UNSPECIFIED


def test_newer_xe_prints_only_the_type_and_puts_the_details_in_survivability_info(
    tmp_path: Path,
) -> None:
    # xe_survivability_mode.c (newer): survivability_mode_show is sysfs_emit("%s\n", "Boot"
    # or "Runtime"); survivability_info_show prints each visible register as "0x%x\n" and
    # fdo_mode as str_enabled_disabled() (the attribute group "survivability_info").
    host = scenarios.arc_b580_in_tree(tmp_path)
    device = host.device_dir(B580)
    host.write(f"{device}/survivability_mode", "Boot\n")
    host.write(f"{device}/survivability_info/capability_info", "0x2138344\n")
    host.write(f"{device}/survivability_info/postcode_trace", "0x5\n")
    host.write(f"{device}/survivability_info/fdo_mode", "enabled\n")
    [found] = host.inspect().devices
    assert found.survivability.mode == Mode.BOOT
    assert list(found.survivability.details) == [
        "capability_info: 0x2138344",
        "fdo_mode: enabled",
        "postcode_trace: 0x5",
    ]
    host.remove(f"{device}/survivability_info")
    host.write(f"{device}/survivability_mode", "Runtime\n")
    [found] = host.inspect().devices
    assert (found.survivability.mode, list(found.survivability.details)) == (Mode.RUNTIME, [])
