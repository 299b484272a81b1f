"""Inspect this machine's real root: it must succeed, and non-display Intel functions (this
test machine has an Intel host bridge) must never be reported as GPUs."""

from __future__ import annotations

import datetime
from pathlib import Path

from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb

PCI_DEVICES = Path("/sys/bus/pci/devices")


def pci_functions() -> dict[str, tuple[str, str]]:
    """address -> (vendor, class) as this kernel prints them."""
    return {
        entry.name: (
            (entry / "vendor").read_text().strip(),
            (entry / "class").read_text().strip(),
        )
        for entry in PCI_DEVICES.iterdir()
    }


def test_real_root_inspects_and_reports_only_intel_display_functions() -> None:
    now = datetime.datetime.now(datetime.UTC)
    report = inspect_node(Path("/"), node_name="this-machine", now=now)
    functions = pci_functions()
    intel_display = {a for a, (v, c) in functions.items() if v == "0x8086" and c.startswith("0x03")}
    assert {d.pci_address for d in report.devices} == intel_display
    for device in report.devices:
        assert device.vendor_id == "0x8086"
        assert device.class_code.startswith("0x03")
    assert report.kernel_release == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert report.observed_at.ToDatetime(tzinfo=datetime.UTC) == now
    module_loaded = Path("/sys/module/xe").is_dir()
    assert (report.module.state == pb.Module.NOT_LOADED) is not module_loaded


def test_this_machine_has_a_non_display_intel_function_that_is_not_a_gpu() -> None:
    """The check above would pass vacuously without one; on this machine there is one."""
    functions = pci_functions()
    other_intel = [
        a for a, (v, c) in functions.items() if v == "0x8086" and not c.startswith("0x03")
    ]
    assert other_intel, "expected an Intel host bridge or similar on the test machine"
    report = inspect_node(Path("/"), node_name="n", now=datetime.datetime.now(datetime.UTC))
    assert not {d.pci_address for d in report.devices} & set(other_intel)
