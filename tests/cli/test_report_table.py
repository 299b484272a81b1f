"""The table view of a NodeReport, from hand-built reports (no agent involved)."""

from __future__ import annotations

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.report_table import clients_cell, module_summary, render_report
from gpuctl.rollout.input.pod_facts import PodFacts


def _pf_with_vfs() -> pb.NodeReport:
    report = pb.NodeReport(node_name="gpu-1", kernel_release="6.8.0-60-generic")
    report.observed_at.FromSeconds(1_800_000_000)
    pf = report.devices.add(
        pci_address="0000:04:00.0",
        device_id="0xe223",
        driver="xe",
        role=pb.Device.PHYSICAL,
        platform="Battlemage G31",
    )
    pf.sriov.total_vfs, pf.sriov.num_vfs = 12, 2
    for fn in (1, 2):
        report.devices.add(
            pci_address=f"0000:04:00.{fn}",
            device_id="0xe223",
            driver="vfio-pci",
            role=pb.Device.VIRTUAL,
            physfn="0000:04:00.0",
            platform="Battlemage G31",
        )
    report.devices.add(
        pci_address="0000:00:02.0",
        device_id="0x64a0",
        driver="xe",
        role=pb.Device.STANDALONE,
        platform="Lunar Lake",
    )
    report.module.CopyFrom(
        pb.Module(name="xe", state=pb.Module.LIVE, provenance=pb.Module.IN_TREE, refcnt=0)
    )
    report.client_scan.state = pb.ClientScan.COMPLETE
    return report


def test_vfs_are_listed_under_their_physical_function() -> None:
    lines = render_report(_pf_with_vfs()).splitlines()
    rows = [line for line in lines if "0000:" in line]
    assert [row.split()[0] for row in rows] == [
        "0000:00:02.0",
        "0000:04:00.0",
        "0000:04:00.1",
        "0000:04:00.2",
    ]
    assert rows[2].startswith("  0000:04:00.1")
    assert "2/12" in rows[1]
    assert "Battlemage G31 VF (e223)" in rows[2]


def test_unreadable_vf_count_is_unknown_not_zero() -> None:
    report = _pf_with_vfs()
    report.devices[0].sriov.ClearField("num_vfs")
    row = next(line for line in render_report(report).splitlines() if "04:00.0" in line)
    assert "unknown/12" in row


def test_clients_count_distinct_client_ids_not_processes() -> None:
    device = pb.Device(pci_address="0000:03:00.0")
    device.clients.add(pid=10, command="parent", client_ids=[42])
    device.clients.add(pid=11, command="child", client_ids=[42])
    device.clients.add(pid=12, command="other", client_ids=[7])
    assert clients_cell(device, clients_known=True) == "2 (3 processes)"


def test_unknown_clients_are_never_shown_as_zero() -> None:
    report = _pf_with_vfs()
    report.client_scan.state = pb.ClientScan.INCOMPLETE
    rows = [line for line in render_report(report).splitlines() if "0000:" in line]
    assert len(rows) == 4
    assert all("unknown" in row and not row.endswith(" 0") for row in rows)
    assert "0" not in clients_cell(pb.Device(), clients_known=False)


def test_passthrough_functions_have_unknown_clients_not_zero() -> None:
    rows = [line for line in render_report(_pf_with_vfs()).splitlines() if "vfio-pci" in line]
    assert len(rows) == 2
    assert all(row.endswith("unknown (VM)") for row in rows)


def test_module_line_names_provenance_tag_and_holders() -> None:
    module = pb.Module(
        name="xe",
        state=pb.Module.LIVE,
        provenance=pb.Module.OUT_OF_TREE,
        backport_tag="xeb_v7.1.4.6_260728.7",
        refcnt=3,
        holders=["xe_compat"],
    )
    assert module_summary(module) == (
        "live, out-of-tree xeb_v7.1.4.6_260728.7, refcnt 3, held by xe_compat"
    )


def test_unknown_refcnt_is_shown_as_unknown() -> None:
    module = pb.Module(name="xe", state=pb.Module.LIVE, provenance=pb.Module.UNKNOWN)
    assert "refcnt unknown" in module_summary(module)
    assert "provenance unknown" in module_summary(module)


def test_blockers_are_spelled_out() -> None:
    report = _pf_with_vfs()
    report.blockers.add(
        reason=pb.Blocker.ACTIVE_VFS,
        pci_address="0000:04:00.0",
        message="2 VFs enabled, bound to vfio-pci (handed to VMs)",
    )
    text = render_report(report)
    assert "Unloading xe now would fail or hurt:" in text
    assert "  - 2 VFs enabled, bound to vfio-pci (handed to VMs)" in text
    assert "Nothing blocks" not in text


def test_no_gpus_and_module_not_loaded() -> None:
    report = pb.NodeReport(node_name="vm")
    report.module.state = pb.Module.NOT_LOADED
    text = render_report(report)
    assert "No Intel GPUs" in text
    assert "xe is not loaded: nothing to unload." in text


def test_warnings_are_listed_with_their_paths() -> None:
    report = _pf_with_vfs()
    report.warnings.add(path="sys/bus/pci/devices/0000:04:00.0/numa_node", message="not a number")
    assert "  sys/bus/pci/devices/0000:04:00.0/numa_node: not a number" in render_report(report)


def _held_open() -> pb.NodeReport:
    report = pb.NodeReport(node_name="n1")
    device = report.devices.add(pci_address="0000:03:00.0", driver="xe")
    device.drm.render = "renderD128"
    pod = pb.ProcessOwner(kind=pb.ProcessOwner.POD, pod_uid="uid-xpum", container_id="c0ffee")
    device.clients.add(pid=4242, command="xpumd", owner=pod)
    device.clients.add(pid=77, command="Xorg", owner=pb.ProcessOwner(kind=pb.ProcessOwner.HOST))
    unknown = pb.ProcessOwner(kind=pb.ProcessOwner.UNKNOWN, message="cannot read its cgroup")
    device.clients.add(pid=9, command="ghost", owner=unknown)
    return report


def test_every_gpu_client_is_listed_with_its_pod_where_the_pods_are_known() -> None:
    xpum = PodFacts(
        "monitoring",
        "xpumanager-7x2kq",
        "uid-xpum",
        owner_kind="DaemonSet",
        owner_name="xpumanager",
    )
    named = render_report(_held_open(), [xpum])
    assert "GPU clients (3):" in named
    assert (
        "  - pod monitoring/xpumanager-7x2kq (DaemonSet monitoring/xpumanager), pid 4242 (xpumd), "
        "renderD128" in named
    )
    assert "  - host process pid 77 (Xorg), renderD128" in named
    assert (
        "  - a process of unknown owner (cannot read its cgroup), pid 9 (ghost), renderD128"
        in named
    )
    # Pods not looked up (--local, or the coordinator as the source): the UID, never a guess.
    local = render_report(_held_open())
    assert "  - pod UID uid-xpum, pid 4242 (xpumd), renderD128" in local
    # Pods looked up and the UID not among them: said so.
    missing = render_report(_held_open(), [])
    assert "a pod with UID uid-xpum not among the node's pods" in missing


def test_vm_holders_are_listed_by_their_pod_once_per_process() -> None:
    report = pb.NodeReport(node_name="n1")
    owner = pb.ProcessOwner(kind=pb.ProcessOwner.POD, pod_uid="uid-vm")
    for vf in ("0000:03:00.1", "0000:03:00.2"):
        device = report.devices.add(pci_address=vf, driver="vfio-pci", physfn="0000:03:00.0")
        device.vfio_holders.add(pid=4711, command="qemu-kvm", owner=owner)
    host = pb.ProcessOwner(kind=pb.ProcessOwner.HOST)
    device = report.devices.add(pci_address="0000:83:00.1", driver="vfio-pci")
    device.vfio_holders.add(pid=4712, command="qemu-kvm", owner=host)
    vm = PodFacts("vms", "virt-launcher-win11-x7k2p", "uid-vm", "VirtualMachineInstance", "win11")
    named = render_report(report, [vm])
    assert "VM holders, through VFIO (2):" in named
    assert (
        "  - pod vms/virt-launcher-win11-x7k2p (VirtualMachineInstance vms/win11), pid 4711 "
        "(qemu-kvm), 0000:03:00.1, 0000:03:00.2\n" in named
    )
    assert "  - host process pid 4712 (qemu-kvm), 0000:83:00.1\n" in named
    assert "GPU clients" not in named
    assert "pod UID uid-vm, pid 4711" in render_report(report)


def test_a_gpu_in_survivability_mode_is_a_warning_with_xes_details() -> None:
    report = pb.NodeReport(node_name="n1")
    device = report.devices.add(pci_address="0000:03:00.0", driver="xe")
    device.survivability.mode = pb.Survivability.BOOT
    device.survivability.details.append("Capability Info: 0x138344 - 0x1f")
    healthy = report.devices.add(pci_address="0000:83:00.0", driver="xe")
    healthy.survivability.mode = pb.Survivability.NONE
    text = render_report(report)
    assert (
        "WARNING: 0000:03:00.0 is in boot survivability mode: pcode reported a firmware boot "
        "failure; it serves nothing until its firmware is flashed (e.g. fwupd)\n"
        "  Capability Info: 0x138344 - 0x1f\n" in text
    )
    assert "0000:83:00.0 is in" not in text


def test_what_the_kernel_accepts_and_the_modules_signature_are_spelled_out() -> None:
    report = pb.NodeReport(node_name="n1")
    report.module.name = "xe"
    report.module.state = pb.Module.LIVE
    report.module.signature.verified = pb.ModuleSignature.UNVERIFIED
    report.module.signature.file = pb.ModuleSignature.FILE_UNSIGNED
    text = render_report(report)
    assert "Module signatures: unknown (an older agent).\n" in text
    assert (
        "  signature: NOT verified by the kernel (unsigned or untrusted: E); its file is "
        "unsigned\n" in text
    )
    report.kernel_trust.secure_boot = pb.KernelTrust.SECURE_BOOT_ENABLED
    report.kernel_trust.shim_validation_disabled = True
    report.kernel_trust.lockdown = pb.KernelTrust.LOCKDOWN_INTEGRITY
    report.kernel_trust.sig_enforce = pb.KernelTrust.SIG_ENFORCE_OFF
    report.kernel_trust.signatures = pb.KernelTrust.SIGNATURES_ENFORCED
    assert (
        "Kernel: Secure Boot on (shim validation off), lockdown integrity, sig_enforce off: "
        "only modules signed with a key it trusts load.\n" in render_report(report)
    )
    report.kernel_trust.lockdown = pb.KernelTrust.LOCKDOWN_UNSPECIFIED
    report.kernel_trust.signatures = pb.KernelTrust.SIGNATURES_UNSPECIFIED
    assert "lockdown unknown, sig_enforce off: unknown whether unsigned modules load." in (
        render_report(report)
    )


def test_a_module_signed_with_an_enrolled_mok_says_so() -> None:
    report = pb.NodeReport(node_name="n1")
    report.module.state = pb.Module.LIVE
    signature = report.module.signature
    signature.verified = pb.ModuleSignature.VERIFIED
    signature.file = pb.ModuleSignature.FILE_SIGNED
    signature.signer, signature.key_id, signature.hash_algorithm = "ACME", "1D:5E:7A", "sha256"
    report.kernel_trust.mok_list.keys.add(signer="ACME", key_id="1D:5E:7A")
    text = render_report(report)
    assert "key 1D:5E:7A (an enrolled MOK), sha256" in text
    assert "  enrolled MOK keys: 'ACME' 1D:5E:7A\n" in text
    report.kernel_trust.mok_list.keys[0].key_id = "99"
    assert "(an enrolled MOK)" not in render_report(report)
