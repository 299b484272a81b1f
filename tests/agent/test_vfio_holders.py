"""The VFIO holder scan (agent/vfio_holders.py): which process holds a GPU function handed to
a VM, from the group and device files on fake host roots, and unknown whenever it cannot tell."""

from __future__ import annotations

from pathlib import Path

from agent.drm_clients import ScanState
from agent.pci import scan_intel_gpus
from agent.vfio_holders import VfioScanOutcome, scan_vfio_holders
from agent.warninglog import WarningLog
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost, scenarios
from testbed.fakehost.scenarios import B70_PFS


def scan(host: FakeHost) -> tuple[VfioScanOutcome, WarningLog]:
    log = WarningLog()
    files = host.files()
    gpus = scan_intel_gpus(files, log).gpus
    return scan_vfio_holders(files, gpus, log, syscalls=host.proc_syscalls()), log


def vm_host(root: Path) -> FakeHost:
    return scenarios.two_pro_b70_with_vfs(root, vf_driver="vfio-pci")


def vfs_of(host: FakeHost, pf: str) -> list[str]:
    return [a for a in host.functions_bound_to("vfio-pci") if a.startswith(pf[:8])]


def test_no_function_handed_to_a_vm_is_not_swept(tmp_path: Path) -> None:
    outcome, _ = scan(scenarios.two_pro_b70_with_vfs(tmp_path, vf_driver="xe"))
    assert outcome.state is ScanState.SKIPPED_UNUSED
    assert outcome.processes_scanned == 0


def test_a_passthrough_driver_holding_no_reference_means_no_vm_runs(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    host.write("sys/module/vfio_pci/refcnt", "0\n")
    outcome, _ = scan(host)
    assert outcome.state is ScanState.SKIPPED_UNUSED
    assert "hold no reference" in outcome.message
    assert not outcome.holders_by_device
    # The groups are known all the same.
    assert len(outcome.iommu_groups) == 8


def test_an_unreadable_refcnt_sweeps(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    host.deny("sys/module/vfio_pci/refcnt")
    outcome, _ = scan(host)
    assert outcome.state is ScanState.COMPLETE
    assert sum(len(h) for h in outcome.holders_by_device.values()) == 8


def test_each_vm_is_found_by_its_group_files(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    outcome, _ = scan(host)
    assert outcome.state is ScanState.COMPLETE
    for pf, pid in zip(B70_PFS, scenarios.VM_PIDS, strict=True):
        for vf in vfs_of(host, pf):
            (holder,) = outcome.holders_by_device[vf]
            assert (holder.pid, holder.command, holder.fd_count) == (pid, "qemu-kvm", 1)
            assert holder.paths == [f"/dev/vfio/{host.iommu_group(vf)}"]
    assert outcome.holders_by_device[vfs_of(host, B70_PFS[0])[0]][0].owner is not None


def test_an_iommufd_device_file_is_a_holding_too(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_pci_function("0000:03:00.0", device=0xE20B, class_code=0x030000, driver="vfio-pci")
    host.add_module("vfio_pci", refcnt=1)
    host.add_vfio_cdev("0000:03:00.0", "vfio0")
    host.add_process(900, "qemu-system-x86", cgroup="0::/system.slice/vm.service\n")
    host.add_vfio_fd(900, 30, "0000:03:00.0", cdev="vfio0")
    host.add_vfio_fd(900, 31, "0000:03:00.0", cdev="vfio0")
    outcome, _ = scan(host)
    (holder,) = outcome.holders_by_device["0000:03:00.0"]
    assert holder.paths == ["/dev/vfio/devices/vfio0"]
    assert holder.fd_count == 2


def test_a_process_that_cannot_be_examined_makes_holders_unknown(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    host.deny("proc/4712/fd")
    outcome, _ = scan(host)
    assert outcome.state is ScanState.INCOMPLETE
    assert "pid 4712" in outcome.message
    assert "unknown" in outcome.message
    assert not any(h.pid == 4712 for hs in outcome.holders_by_device.values() for h in hs)


def test_an_unreadable_iommu_group_makes_holders_unknown_and_says_so(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    vf = vfs_of(host, B70_PFS[0])[0]
    host.deny(f"{host.device_dir(vf)}/iommu_group")
    outcome, log = scan(host)
    assert outcome.state is ScanState.INCOMPLETE
    assert f"the IOMMU group of {vf} cannot be read" in outcome.message
    assert vf not in outcome.iommu_groups
    assert any(w.path.endswith("iommu_group") for w in log.entries)


def test_garbage_for_a_group_is_not_a_group(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    vf = vfs_of(host, B70_PFS[1])[0]
    host.remove(f"{host.device_dir(vf)}/iommu_group")
    host.symlink(f"{host.device_dir(vf)}/iommu_group", "../../kernel/iommu_groups/x\n1")
    outcome, log = scan(host)
    assert outcome.state is ScanState.INCOMPLETE
    assert any("not an IOMMU group" in w.message for w in log.entries)


def test_an_unmounted_proc_fails_the_scan(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    host.deny("proc")
    outcome, _ = scan(host)
    assert outcome.state is ScanState.FAILED
    assert "VM holders are unknown" in outcome.message


def test_the_report_carries_groups_holders_and_the_scan(tmp_path: Path) -> None:
    report = vm_host(tmp_path).inspect()
    assert report.vfio_scan.state == pb.ClientScan.COMPLETE
    physical = [d for d in report.devices if d.role == pb.Device.PHYSICAL]
    # Only functions handed to a VM carry a group: the rest are of no VM.
    assert all(not d.iommu_group and not d.vfio_holders for d in physical)
    assert "held by pid 4711 (qemu-kvm)" in report.blockers[0].message


def test_a_vf_no_process_holds_is_said_to_be_open_by_none(tmp_path: Path) -> None:
    host = vm_host(tmp_path)
    host.remove_process(4711)
    report = host.inspect()
    assert "(vfio-pci: handed to a VM, open by no process)" in report.blockers[0].message
    assert "held by pid 4712" in report.blockers[1].message


def test_a_no_iommu_group_and_device_file_are_holdings_too(tmp_path: Path) -> None:
    # drivers/vfio/group.c vfio_create_group: dev_set_name("%s%d", type == VFIO_NO_IOMMU ?
    # "noiommu-" : "", iommu_group_id) -> /dev/vfio/noiommu-<group>; vfio_main.c
    # __vfio_register_dev: "%svfio%d" with the same prefix -> /dev/vfio/devices/noiommu-vfio<n>
    # (sysfs vfio-dev/noiommu-vfio<n>). The sysfs iommu_group link names the group's number.
    host = FakeHost(tmp_path)
    host.add_pci_function("0000:03:00.0", device=0xE20B, class_code=0x030000, driver="vfio-pci")
    host.add_module("vfio_pci", refcnt=2)
    group = host.iommu_group("0000:03:00.0")
    host.add_vfio_cdev("0000:03:00.0", "noiommu-vfio0")
    host.add_process(901, "dpdk-testpmd", cgroup="0::/system.slice/dpdk.service\n")
    host.symlink("proc/901/fd/30", f"/dev/vfio/noiommu-{group}")
    host.add_process(902, "qemu-system-x86", cgroup="0::/system.slice/vm.service\n")
    host.symlink("proc/902/fd/31", "/dev/vfio/devices/noiommu-vfio0")
    outcome, _ = scan(host)
    assert outcome.state is ScanState.COMPLETE
    holders = outcome.holders_by_device["0000:03:00.0"]
    assert [(h.pid, h.paths) for h in holders] == [
        (901, [f"/dev/vfio/noiommu-{group}"]),
        (902, ["/dev/vfio/devices/noiommu-vfio0"]),
    ]
