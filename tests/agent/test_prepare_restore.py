"""Prepare and restore against a fake kernel acting on fake hosts: the round trip, a failed
write half way, restore going on past failures, and requests that make no sense."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from agent.inspect import MODULE_NAME
from agent.prepare import prepare_node
from agent.restore import restore_node
from agent.sysfs_write import DRIVERS_PROBE, HostSysfsWriter, bind_path, numvfs_path, unbind_path
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import (
    B70_PFS,
    B580,
    arc_b580_in_tree,
    dkms_out_of_tree,
    two_pro_b70_with_vfs,
)
from tests.agent.fake_kernel import FakeKernel

PF0, PF1 = B70_PFS


def layout(report: pb.NodeReport) -> list[tuple[str, str, str, str, int]]:
    """What a round trip must give back: functions, their drivers and roles, VF counts."""
    return [
        (d.pci_address, d.driver, pb.Device.Role.Name(d.role), d.physfn, d.sriov.num_vfs)
        for d in report.devices
    ]


def prepare(
    host: FakeHost, kernel: FakeKernel, *, module: str = "xe", request_id: str = "p-1"
) -> api.PrepareResult:
    request = api.PrepareRequest(
        request_id=request_id, module_name=module, allow_unbind=True, allow_disable_vfs=True
    )
    return prepare_node(request, inspected_module=MODULE_NAME, inspect=host.inspect, writer=kernel)


def restore(
    host: FakeHost, kernel: FakeKernel, changes: list[api.NodeChange], request_id: str = "r-1"
) -> api.RestoreResult:
    request = api.RestoreRequest(request_id=request_id, changes=changes)
    return restore_node(request, inspect=host.inspect, files=host.files(), writer=kernel)


def disabled(pf: str, count: int = 4) -> api.NodeChange:
    return api.NodeChange(disabled_vfs=api.DisabledVfs(pci_address=pf, num_vfs=count))


def unbound(address: str) -> api.NodeChange:
    return api.NodeChange(unbound=api.UnboundFunction(pci_address=address, driver="xe"))


def test_prepare_then_restore_gives_the_node_back(tmp_path: Path) -> None:
    host = two_pro_b70_with_vfs(tmp_path)
    kernel = FakeKernel(host)
    before = layout(host.inspect())
    prepared = prepare(host, kernel)
    assert (prepared.request_id, prepared.ready, prepared.error) == ("p-1", True, "")
    assert list(prepared.blockers) == []
    assert list(prepared.changes) == [disabled(PF0), disabled(PF1), unbound(PF0), unbound(PF1)]
    assert layout(prepared.report) == [(address, "", "PHYSICAL", "", 0) for address in B70_PFS]
    restored = restore(host, kernel, list(prepared.changes))
    assert (restored.request_id, list(restored.errors)) == ("r-1", [])
    assert list(restored.restored) == list(reversed(prepared.changes))
    assert layout(restored.report) == before
    assert kernel.writes == [
        (numvfs_path(PF0), "0"),
        (numvfs_path(PF1), "0"),
        (unbind_path("xe"), PF0),
        (unbind_path("xe"), PF1),
        (DRIVERS_PROBE, PF1),
        (DRIVERS_PROBE, PF0),
        (numvfs_path(PF1), "4"),
        (numvfs_path(PF0), "4"),
    ]


def test_a_failed_write_stops_and_reports_what_was_done(tmp_path: Path) -> None:
    host = two_pro_b70_with_vfs(tmp_path)
    kernel = FakeKernel(host)
    kernel.fail(unbind_path("xe"), errno.EBUSY, text=PF0)
    result = prepare(host, kernel)
    assert not result.ready
    assert list(result.changes) == [disabled(PF0), disabled(PF1)]
    assert result.error == (
        "unbinding 0000:03:00.0 from xe failed: EBUSY (Device or resource busy): the kernel "
        "says it is busy; the 2 changes before it were made"
    )
    assert len(kernel.writes) == 3  # nothing after the failed write
    assert [(d.pci_address, d.driver) for d in result.report.devices] == [(PF0, "xe"), (PF1, "xe")]


def test_restore_goes_on_past_a_failure_and_lists_it(tmp_path: Path) -> None:
    host = two_pro_b70_with_vfs(tmp_path)
    kernel = FakeKernel(host)
    changes = list(prepare(host, kernel).changes)
    kernel.fail(DRIVERS_PROBE, errno.EACCES, text=PF0)
    result = restore(host, kernel, changes)
    assert list(result.restored) == [unbound(PF1), disabled(PF1)]
    assert list(result.errors) == [
        "undoing unbinding 0000:03:00.0 from xe: probing it (drivers_probe) failed: EACCES "
        "(Permission denied): the agent may not write sysfs (it must run as root on the "
        "host's /sys)",
        # The kernel needs the PF's driver to enable VFs.
        "undoing disabling the 4 VFs of 0000:03:00.0 (sriov_numvfs to 0): setting "
        "sriov_numvfs to 4 failed: ENOENT (No such file or directory): no such attribute, or "
        "the function has no driver to do it",
    ]
    assert [(d.pci_address, d.driver, d.sriov.num_vfs) for d in result.report.devices][:2] == [
        (PF0, "", 0),
        (PF1, "xe", 4),
    ]


def test_restore_skips_what_the_new_module_already_did_and_resets_another_vf_count(
    tmp_path: Path,
) -> None:
    host = two_pro_b70_with_vfs(tmp_path)
    kernel = FakeKernel(host)
    changes = list(prepare(host, kernel).changes)
    # The new module probed both PFs at load and enabled 2 VFs on the second by itself.
    kernel.write(DRIVERS_PROBE, PF0)
    kernel.write(DRIVERS_PROBE, PF1)
    kernel.write(numvfs_path(PF1), "2")
    kernel.writes.clear()
    result = restore(host, kernel, changes)
    assert list(result.errors) == []
    assert kernel.writes == [
        (numvfs_path(PF1), "0"),
        (numvfs_path(PF1), "4"),
        (numvfs_path(PF0), "4"),
    ]


def test_restore_says_when_no_driver_takes_a_function(tmp_path: Path) -> None:
    host = arc_b580_in_tree(tmp_path)
    changes = list(prepare(host, FakeKernel(host)).changes)
    assert changes == [unbound(B580)]
    no_xe = FakeKernel(host, probe_driver=None)
    refused = restore(host, no_xe, changes)
    assert list(refused.restored) == []
    assert list(refused.errors) == [
        "undoing unbinding 0000:03:00.0 from xe: binding it to xe failed: ENODEV (No such "
        "device): the function is gone, or that driver is not bound to it (unbind) or does not "
        "take it (bind)"
    ]
    assert no_xe.writes == [(DRIVERS_PROBE, B580), (bind_path("xe"), B580)]
    host.remove("sys/bus/pci/drivers/xe")  # xe is not loaded at all
    result = restore(host, no_xe, changes)
    assert list(result.errors) == [
        "undoing unbinding 0000:03:00.0 from xe: no driver took it: is xe loaded?"
    ]


def test_restore_of_garbage_answers_each_change_in_words(tmp_path: Path) -> None:
    host = arc_b580_in_tree(tmp_path)
    kernel = FakeKernel(host)
    changes = [
        unbound("0000:99:00.0"),
        unbound("../../../etc"),
        disabled(B580, 0),
        api.NodeChange(),
    ]
    result = restore(host, kernel, changes)
    assert list(result.restored) == []
    assert list(result.errors) == [
        "undoing an empty change: the change has no kind (neither unbound nor disabled_vfs)",
        "undoing disabling the 0 VFs of 0000:03:00.0 (sriov_numvfs to 0): num_vfs is 0: "
        "there is no earlier VF count to restore",
        "undoing unbinding ../../../etc from xe: '../../../etc' is not a PCI address like "
        "0000:03:00.0",
        "undoing unbinding 0000:99:00.0 from xe: there is no PCI function 0000:99:00.0 on "
        "this node",
    ]
    assert kernel.writes == []
    assert result.report.node_name == "gpu-node-1"
    no_id = restore(host, kernel, [unbound(B580)], request_id="")
    assert list(no_id.errors) == [
        "the RestoreRequest has no request_id: nothing was changed (its answer could not be "
        "matched)"
    ]


@pytest.mark.parametrize(
    ("module", "request_id", "error"),
    [
        (
            "i915",
            "p-1",
            "this agent manages the xe module; it cannot prepare an unload of 'i915'",
        ),
        ("", "p-1", "the PrepareRequest names no module"),
        ("xe", "", "the PrepareRequest has no request_id: its answer could not be matched"),
    ],
)
def test_a_request_that_makes_no_sense_changes_nothing(
    tmp_path: Path, module: str, request_id: str, error: str
) -> None:
    host = arc_b580_in_tree(tmp_path)
    kernel = FakeKernel(host)
    result = prepare(host, kernel, module=module, request_id=request_id)
    assert (result.ready, result.error, list(result.changes)) == (False, error, [])
    assert kernel.writes == []


def test_a_refused_preparation_changes_nothing_and_answers_the_report(tmp_path: Path) -> None:
    host = two_pro_b70_with_vfs(tmp_path, vf_driver="vfio-pci")
    kernel = FakeKernel(host)
    result = prepare(host, kernel)
    assert (result.ready, result.error, list(result.changes)) == (False, "", [])
    assert [b.pci_address for b in result.blockers] == list(B70_PFS)
    assert len(result.report.devices) == 10
    assert kernel.writes == []


def test_the_host_writer_writes_existing_attributes_and_never_creates_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys/attribute").write_text("4\n")
    writer = HostSysfsWriter(tmp_path)
    writer.write("sys/attribute", "0")
    assert (tmp_path / "sys/attribute").read_text() == "0\n"  # no truncation: sysfs has none
    with pytest.raises(FileNotFoundError):
        writer.write("sys/missing", "0")
    assert not (tmp_path / "sys/missing").exists()


@pytest.mark.parametrize("unloaded_with", [["xe_compat"], []])
def test_a_holder_blocks_plan_and_answer_listed_in_modules_loading_order_or_not(
    tmp_path: Path, unloaded_with: list[str]
) -> None:
    host = dkms_out_of_tree(tmp_path)
    kernel = FakeKernel(host)
    request = api.PrepareRequest(
        request_id="p-1", module_name="xe", allow_unbind=True, unloaded_with=unloaded_with
    )
    result = prepare_node(
        request, inspected_module=MODULE_NAME, inspect=host.inspect, writer=kernel
    )
    assert (result.ready, result.error) == (False, "")
    assert [pb.Blocker.Reason.Name(b.reason) for b in result.blockers] == ["MODULE_HOLDERS"]
    assert list(result.changes) == []
    assert list(result.report.module.holders) == ["xe_compat"]
