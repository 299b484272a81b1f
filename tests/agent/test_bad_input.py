"""Bad input never crashes an inspection: the report names what it could not read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.fdscan import OS_SYSCALLS, ProcSyscalls
from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost, scenarios
from testbed.fakehost.host import FIXED_NOW
from testbed.fakehost.scenarios import B580

Reason = pb.Blocker.Reason
DEVICE_DIR = f"sys/bus/pci/devices/{B580}"


def warnings_of(report: pb.NodeReport) -> list[tuple[str, str]]:
    return [(w.path, w.message) for w in report.warnings]


def test_garbage_class_skips_only_that_function(tmp_path: Path) -> None:
    host = scenarios.meteor_lake_and_battlemage(tmp_path)
    host.write(f"{host.device_dir(B580)}/class", b"\x00\xffnot-a-class\n")
    report = host.inspect()
    assert [d.pci_address for d in report.devices] == ["0000:00:02.0"]
    assert warnings_of(report) == [(f"{DEVICE_DIR}/class", "not text (invalid UTF-8)")]


def test_garbage_numa_node_is_absent_not_zero(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.set_attribute(B580, "numa_node", "lots\n")
    report = host.inspect()
    assert not report.devices[0].HasField("numa_node")
    assert warnings_of(report) == [(f"{DEVICE_DIR}/numa_node", "not a decimal number: 'lots'")]


def test_garbage_device_id_keeps_the_gpu_without_a_platform(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.set_attribute(B580, "device", "0xzz\n")
    report = host.inspect()
    assert [(d.pci_address, d.device_id, d.platform) for d in report.devices] == [(B580, "", "")]
    assert warnings_of(report) == [(f"{DEVICE_DIR}/device", "not a hexadecimal number: '0xzz'")]


def test_missing_vendor_attribute(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.remove(f"{host.device_dir(B580)}/vendor")
    report = host.inspect()
    assert list(report.devices) == []
    assert warnings_of(report) == [(f"{DEVICE_DIR}/vendor", "missing")]


def test_dangling_device_symlink(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.symlink("sys/bus/pci/devices/0000:09:00.0", "../../../devices/pci0000:00/0000:09:00.0")
    report = host.inspect()
    assert [d.pci_address for d in report.devices] == [B580]
    assert warnings_of(report) == [
        ("sys/bus/pci/devices/0000:09:00.0", "dangling symlink: the device has gone")
    ]


def test_dangling_driver_link_is_unknown_and_blocks(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.symlink(f"{host.device_dir(B580)}/driver", "../../../../../../bus/pci/drivers/gone")
    report = host.inspect()
    assert report.devices[0].driver == ""
    assert [w.path for w in report.warnings] == [f"{DEVICE_DIR}/driver"]
    assert "dangling symlink" in report.warnings[0].message
    assert [(b.reason, b.pci_address) for b in report.blockers] == [(Reason.STATE_UNKNOWN, B580)]
    # A GPU whose driver is unknown might be held open: the scan is not skipped.
    assert report.client_scan.state == pb.ClientScan.COMPLETE


def test_unreadable_refcnt_is_absent_and_blocks(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.deny("sys/module/xe/refcnt")
    report = host.inspect()
    assert not report.module.HasField("refcnt")
    assert warnings_of(report) == [("sys/module/xe/refcnt", "permission denied")]
    assert [b.reason for b in report.blockers] == [Reason.STATE_UNKNOWN]
    assert report.blockers[0].message == "cannot read xe's refcnt"
    assert report.client_scan.state == pb.ClientScan.COMPLETE


def test_unreadable_sriov_numvfs_blocks(tmp_path: Path) -> None:
    host = scenarios.two_pro_b70_with_vfs(tmp_path)
    pf = scenarios.B70_PFS[0]
    host.deny(f"{host.device_dir(pf)}/sriov_numvfs")
    report = host.inspect()
    unknown = [b for b in report.blockers if b.reason == Reason.STATE_UNKNOWN]
    assert [(b.pci_address, b.message) for b in unknown] == [
        (pf, f"cannot read sriov_numvfs of {pf}: active VFs unknown")
    ]
    assert (f"sys/bus/pci/devices/{pf}/sriov_numvfs", "permission denied") in warnings_of(report)
    device = next(d for d in report.devices if d.pci_address == pf)
    assert not device.sriov.HasField("num_vfs"), "unknown active VFs must be absent, not 0"
    assert device.sriov.total_vfs == 12


def test_unreadable_sriov_totals_still_make_a_pf_whose_vfs_are_unknown(tmp_path: Path) -> None:
    host = scenarios.two_pro_b70_with_vfs(tmp_path)
    pf = scenarios.B70_PFS[1]
    host.deny(f"{host.device_dir(pf)}/sriov_totalvfs")
    host.deny(f"{host.device_dir(pf)}/sriov_numvfs")
    report = host.inspect()
    device = next(d for d in report.devices if d.pci_address == pf)
    assert device.role == pb.Device.PHYSICAL
    assert len(device.sriov.vfs) == 4
    assert [(b.reason, b.pci_address) for b in report.blockers] == [
        (Reason.ACTIVE_VFS, scenarios.B70_PFS[0]),
        (Reason.STATE_UNKNOWN, pf),
    ]
    assert [w.path for w in report.warnings] == [
        f"sys/bus/pci/devices/{pf}/sriov_totalvfs",
        f"sys/bus/pci/devices/{pf}/sriov_numvfs",
    ]


def test_unreadable_drm_directory(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.deny(f"{host.device_dir(B580)}/drm")
    report = host.inspect()
    assert not report.devices[0].HasField("drm")
    assert warnings_of(report) == [(f"{DEVICE_DIR}/drm", "permission denied")]


def test_unreadable_pci_device_list_blocks(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.deny("sys/bus/pci/devices")
    report = host.inspect()
    assert list(report.devices) == []
    assert warnings_of(report) == [("sys/bus/pci/devices", "permission denied")]
    assert [b.message for b in report.blockers] == ["cannot list PCI devices: GPU bindings unknown"]


def test_unreadable_module_holders_blocks(tmp_path: Path) -> None:
    host = scenarios.dkms_out_of_tree(tmp_path)
    host.deny("sys/module/xe/holders")
    report = host.inspect()
    assert list(report.module.holders) == []
    assert Reason.STATE_UNKNOWN in [b.reason for b in report.blockers]
    assert ("sys/module/xe/holders", "permission denied") in warnings_of(report)


def test_garbage_initstate(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.write("sys/module/xe/initstate", "sleepy\n")
    report = host.inspect()
    assert report.module.state == pb.Module.STATE_UNSPECIFIED
    assert warnings_of(report) == [("sys/module/xe/initstate", "unknown module state 'sleepy'")]
    assert [b.message for b in report.blockers] == ["cannot read xe's initstate"]


def test_corrupt_module_file_is_a_warning(tmp_path: Path) -> None:
    host = scenarios.dkms_out_of_tree(tmp_path)
    host.write(f"lib/modules/{host.kernel_release}/updates/dkms/xe.ko.zst", b"not zstd")
    report = host.inspect()
    assert report.module.filename == ""
    assert report.module.provenance == pb.Module.OUT_OF_TREE
    [(path, message)] = warnings_of(report)
    assert path == f"lib/modules/{host.kernel_release}/updates/dkms/xe.ko.zst"
    assert message.startswith("unreadable module file: cannot decompress")


def test_denied_process_fd_directory_means_clients_unknown(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    host.add_process(4000, "secret-workload")
    host.deny("proc/4000/fd")
    report = host.inspect()
    assert report.client_scan.state == pb.ClientScan.INCOMPLETE
    assert report.client_scan.processes_denied == 1
    assert report.client_scan.processes_scanned == 5
    assert [b.reason for b in report.blockers] == [Reason.OPEN_CLIENTS, Reason.CLIENTS_UNKNOWN]
    # The clients that were seen are still reported.
    assert [c.pid for c in report.devices[0].clients] == [2101, 2102, 2200]


def test_unreadable_proc_fails_the_scan(tmp_path: Path) -> None:
    scenarios.open_render_clients(tmp_path)

    def refuse_proc(path: str, dir_fd: int | None) -> int:
        if dir_fd is None:
            raise PermissionError(13, "Permission denied", path)
        return OS_SYSCALLS.open_dir(path, dir_fd)

    syscalls = ProcSyscalls(refuse_proc, os.listdir, os.readlink, os.close)
    report = inspect_node(tmp_path, node_name="n", now=FIXED_NOW, proc_syscalls=syscalls)
    assert report.client_scan.state == pb.ClientScan.FAILED
    assert warnings_of(report) == [("proc", "permission denied")]
    assert [b.reason for b in report.blockers] == [Reason.CLIENTS_UNKNOWN]
    assert all(len(d.clients) == 0 for d in report.devices)


def test_empty_proc_is_unmounted_not_idle(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    for pid in (1, 2101, 2102, 2200, 2300):
        host.remove_process(pid)
    report = host.inspect()
    assert report.client_scan.state == pb.ClientScan.FAILED
    assert warnings_of(report) == [
        ("proc", "no process directories: is the host's /proc mounted there?")
    ]
    assert [b.reason for b in report.blockers] == [Reason.CLIENTS_UNKNOWN]


class ExitingProcess:
    """/proc system calls under which `pid` exits after /proc was listed: its fd directory
    is gone (ENOENT), exactly as when a process exits mid-scan."""

    def __init__(self, host: FakeHost, pid: int) -> None:
        self.host = host
        self.pid = pid

    def list_dir(self, fd: int) -> list[str]:
        names = os.listdir(fd)
        if str(self.pid) in names:
            self.host.remove_process(self.pid)
        return names

    def syscalls(self) -> ProcSyscalls:
        return ProcSyscalls(OS_SYSCALLS.open_dir, self.list_dir, os.readlink, os.close)


def test_process_exiting_mid_scan_is_simply_gone(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    syscalls = ExitingProcess(host, 2200).syscalls()
    report = inspect_node(tmp_path, node_name="n", now=FIXED_NOW, proc_syscalls=syscalls)
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    assert [c.pid for c in report.devices[0].clients] == [2101, 2102]
    assert list(report.warnings) == []


class ClosingFd:
    """/proc system calls under which one fd is closed between listing and readlink."""

    def __init__(self, host: FakeHost, pid: int, fd: int) -> None:
        self.host = host
        self.entry = f"proc/{pid}/fd/{fd}"
        self.fd = str(fd)

    def list_dir(self, fd: int) -> list[str]:
        names = os.listdir(fd)
        if self.fd in names and self.host.real(self.entry).is_symlink():
            self.host.remove(self.entry)
        return names

    def syscalls(self) -> ProcSyscalls:
        return ProcSyscalls(OS_SYSCALLS.open_dir, self.list_dir, os.readlink, os.close)


def test_fd_closed_mid_scan_is_not_an_error(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    syscalls = ClosingFd(host, 2200, 8).syscalls()
    report = inspect_node(tmp_path, node_name="n", now=FIXED_NOW, proc_syscalls=syscalls)
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    python3 = report.devices[0].clients[2]
    assert (python3.pid, python3.fd_count) == (2200, 1)


def test_process_gone_before_its_comm_is_read(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    host.remove("proc/2102/comm")
    report = host.inspect()
    assert [c.pid for c in report.devices[0].clients] == [2101, 2200]
    assert list(report.warnings) == []


def test_a_kernel_release_with_a_nul_byte_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    """Found by fuzzing (bench/fuzz/regressions/inspection): the release names a directory
    under lib/modules, and os calls raise ValueError for a path with a NUL byte."""
    host = scenarios.dkms_out_of_tree(tmp_path)
    host.write("proc/sys/kernel/osrelease", b"6.8\x00evil\n")
    report = host.inspect()
    assert report.module.filename == ""
    assert (
        "proc/sys/kernel/osrelease",
        "kernel release '6.8\\x00evil' cannot name a directory",
    ) in (warnings_of(report))


@pytest.mark.parametrize("method", ["read_bytes", "read_link", "list_dir", "exists"])
def test_a_path_with_a_nul_byte_is_an_os_error(tmp_path: Path, method: str) -> None:
    read = getattr(FakeHost(tmp_path).files(), method)
    with pytest.raises(OSError, match="path contains a NUL byte"):
        read("proc/1\x00/comm")


def test_modules_dep_never_leads_outside_the_host_root(tmp_path: Path) -> None:
    host = scenarios.dkms_out_of_tree(tmp_path / "root")
    outside = tmp_path / "xe.ko"
    outside.write_bytes(b"not read")
    host.write(f"lib/modules/{host.kernel_release}/modules.dep", "../../../../xe.ko:\n")
    host.remove(f"lib/modules/{host.kernel_release}/updates")
    report = host.inspect()
    assert report.module.filename == ""
    assert not [w for w in report.warnings if "xe.ko" in w.path]


def test_kernel_taint_flags_of_a_healthy_and_a_degraded_node(tmp_path: Path) -> None:
    healthy = scenarios.kmm_healthy(tmp_path / "healthy").inspect()
    assert healthy.kernel_tainted == scenarios.TAINT_OOT_MODULE | scenarios.TAINT_UNSIGNED_MODULE
    degraded = scenarios.kmm_degraded(tmp_path / "degraded").inspect()
    assert degraded.kernel_tainted & scenarios.TAINT_WARN
    assert warnings_of(healthy) == warnings_of(degraded) == []


def test_an_unreadable_or_garbage_taint_mask_is_absent_not_zero(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.write("proc/sys/kernel/tainted", "lots\n")
    report = host.inspect()
    assert not report.HasField("kernel_tainted")
    assert warnings_of(report) == [("proc/sys/kernel/tainted", "not a taint mask: 'lots'")]
    host.remove("proc/sys/kernel/tainted")
    report = host.inspect()
    assert not report.HasField("kernel_tainted")
    assert warnings_of(report) == [("proc/sys/kernel/tainted", "missing")]
