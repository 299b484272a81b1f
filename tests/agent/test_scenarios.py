"""Every node layout of ../shared/fixtures.md (beside the repository), inspected: the report
fields an unload decision uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import scenarios
from testbed.fakehost.host import FIXED_NOW
from testbed.fakehost.scenarios import (
    B70_PFS,
    B580,
    BACKPORT_SRCVERSION,
    BACKPORT_TAG,
    BACKPORT_VERSION,
    DKMS_XE_FILE,
    IGPU,
    IN_TREE_SRCVERSION,
    IN_TREE_XE_FILE,
    VIRT_LAUNCHER_UID,
)

Reason = pb.Blocker.Reason


def reasons(report: pb.NodeReport) -> list[int]:
    return [blocker.reason for blocker in report.blockers]


def addresses(report: pb.NodeReport) -> list[str]:
    return [device.pci_address for device in report.devices]


def test_1_host_bridge_only_has_no_gpu_and_no_module(tmp_path: Path) -> None:
    report = scenarios.host_bridge_only(tmp_path).inspect(node_name="vm-1")
    assert report.node_name == "vm-1"
    assert report.kernel_release == "6.8.0-60-generic"
    assert report.observed_at.ToDatetime(tzinfo=FIXED_NOW.tzinfo) == FIXED_NOW
    assert report.agent_version
    assert list(report.devices) == []
    assert report.module.name == "xe"
    assert report.module.state == pb.Module.NOT_LOADED
    assert not report.module.HasField("refcnt")
    assert list(report.blockers) == []
    assert list(report.warnings) == []
    assert report.client_scan.state == pb.ClientScan.SKIPPED_UNUSED


def test_2_arc_b580_in_tree_behind_switch_with_audio(tmp_path: Path) -> None:
    report = scenarios.arc_b580_in_tree(tmp_path).inspect()
    # Switch ports (0x0604), the host bridge and the audio function (0x0403) are not GPUs.
    assert addresses(report) == [B580]
    gpu = report.devices[0]
    assert (gpu.vendor_id, gpu.device_id, gpu.class_code) == ("0x8086", "0xe20b", "0x030000")
    assert (gpu.subsystem_vendor_id, gpu.subsystem_device_id) == ("0x8086", "0x1100")
    assert gpu.revision == "0x00"
    assert gpu.driver == "xe"
    assert gpu.driver_override == ""
    assert gpu.role == pb.Device.STANDALONE
    assert not gpu.HasField("sriov")
    assert (gpu.drm.card, gpu.drm.render) == ("card0", "renderD128")
    assert gpu.platform == "Battlemage G21"
    assert gpu.numa_node == 0
    assert gpu.boot_vga is False
    module = report.module
    assert module.state == pb.Module.LIVE
    assert module.refcnt == 0
    assert module.srcversion == IN_TREE_SRCVERSION
    assert module.version == ""
    assert module.taint == ""
    assert module.provenance == pb.Module.IN_TREE
    assert "intree=Y" in module.provenance_evidence
    assert module.filename == IN_TREE_XE_FILE
    assert module.backport_tag == ""
    assert module.parameters["force_probe"] == ""
    assert list(report.blockers) == []
    assert report.client_scan.state == pb.ClientScan.SKIPPED_UNUSED
    assert list(report.warnings) == []


def test_3_two_pro_b70_with_vfs_on_xe(tmp_path: Path) -> None:
    report = scenarios.two_pro_b70_with_vfs(tmp_path, vf_driver="xe").inspect()
    assert len(report.devices) == 10
    pfs = [d for d in report.devices if d.role == pb.Device.PHYSICAL]
    vfs = [d for d in report.devices if d.role == pb.Device.VIRTUAL]
    assert [pf.pci_address for pf in pfs] == list(B70_PFS)
    assert len(vfs) == 8
    for pf in pfs:
        assert pf.platform == "Battlemage G31"
        assert (pf.sriov.total_vfs, pf.sriov.num_vfs) == (12, 4)
        assert pf.sriov.drivers_autoprobe is True
        assert pf.sriov.vf_device_id == "0xe223"
        bus = pf.pci_address[:8]
        assert [(vf.pci_address, vf.driver) for vf in pf.sriov.vfs] == [
            (f"{bus}00.{n}", "xe") for n in range(1, 5)
        ]
    assert [pf.numa_node for pf in pfs] == [0, 1]
    for vf in vfs:
        assert vf.driver == "xe"
        assert vf.physfn == vf.pci_address[:8] + "00.0"
        assert vf.drm.render.startswith("renderD")
    assert reasons(report) == [Reason.ACTIVE_VFS, Reason.ACTIVE_VFS]
    assert [b.pci_address for b in report.blockers] == list(B70_PFS)
    assert report.blockers[0].message == (
        "0000:03:00.0 has 4 VFs enabled: 0000:03:00.1 (xe), 0000:03:00.2 (xe), "
        "0000:03:00.3 (xe), 0000:03:00.4 (xe); set sriov_numvfs to 0 first"
    )


@pytest.mark.parametrize("vf_driver", ["vfio-pci", "xe-vfio-pci"])
def test_3_two_pro_b70_with_vfs_handed_to_vms(tmp_path: Path, vf_driver: str) -> None:
    report = scenarios.two_pro_b70_with_vfs(tmp_path, vf_driver=vf_driver).inspect()
    vfs = [d for d in report.devices if d.role == pb.Device.VIRTUAL]
    assert {vf.driver for vf in vfs} == {vf_driver}
    assert all(not vf.HasField("drm") for vf in vfs)
    assert reasons(report) == [Reason.ACTIVE_VFS, Reason.ACTIVE_VFS]
    held = f"0000:83:00.2 ({vf_driver}: handed to a VM, held by pid 4712 (qemu-kvm))"
    assert held in report.blockers[1].message
    # The VF driver holds references (VMs), so the client scan ran, and found no DRM client.
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    assert all(len(d.clients) == 0 for d in report.devices)
    # Each VM is named by the VFIO files it holds, and by its pod or as a host process.
    assert report.vfio_scan.state == pb.ClientScan.COMPLETE
    first, second = (vf.vfio_holders for vf in vfs[:1] + vfs[4:5])
    assert [(h.pid, h.command, h.owner.kind) for h in first] == [
        (4711, "qemu-kvm", pb.ProcessOwner.POD)
    ]
    assert first[0].owner.pod_uid == VIRT_LAUNCHER_UID
    assert list(first[0].paths) == [f"/dev/vfio/{vfs[0].iommu_group}"]
    assert [(h.pid, h.owner.kind) for h in second] == [(4712, pb.ProcessOwner.HOST)]
    assert all(len(vf.vfio_holders) == 1 and vf.iommu_group for vf in vfs)
    assert len({vf.iommu_group for vf in vfs}) == len(vfs)


def test_4_arc_a770_on_i915_is_no_xe_blocker(tmp_path: Path) -> None:
    report = scenarios.arc_a770_on_i915(tmp_path).inspect()
    assert addresses(report) == [B580]
    gpu = report.devices[0]
    assert gpu.driver == "i915"
    assert gpu.platform.startswith("Alchemist")
    # i915 holds a reference, so the scan ran: Xorg is a client of the i915 device...
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    assert [(c.pid, c.command, list(c.client_ids)) for c in gpu.clients] == [(1500, "Xorg", [7])]
    # ...but not a reason to keep xe loaded: xe has nothing bound.
    assert report.module.state == pb.Module.LIVE
    assert list(report.blockers) == []


def test_5_dkms_out_of_tree_xe(tmp_path: Path) -> None:
    report = scenarios.dkms_out_of_tree(tmp_path).inspect()
    module = report.module
    assert module.state == pb.Module.LIVE
    assert module.taint == "OE"
    assert module.version == BACKPORT_VERSION.strip()
    assert module.srcversion == BACKPORT_SRCVERSION
    assert module.provenance == pb.Module.OUT_OF_TREE
    assert "taint 'OE' includes O" in module.provenance_evidence
    assert module.backport_tag == BACKPORT_TAG
    # Matched by srcversion: not the in-tree xe.ko.zst that is also there.
    assert module.filename == DKMS_XE_FILE
    assert list(module.holders) == ["xe_compat"]
    assert module.refcnt == 1
    assert reasons(report) == [Reason.MODULE_HOLDERS]
    assert report.blockers[0].message == "xe is held by xe_compat: unload it first"
    # refcnt 1 is the holder's: no open file, no scan needed.
    assert report.client_scan.state == pb.ClientScan.SKIPPED_UNUSED


def test_6_kmm_loaded_out_of_tree_xe_has_no_file_on_host(tmp_path: Path) -> None:
    report = scenarios.kmm_out_of_tree(tmp_path).inspect()
    assert report.module.provenance == pb.Module.OUT_OF_TREE
    assert report.module.backport_tag == BACKPORT_TAG
    assert report.module.filename == ""
    assert list(report.warnings) == []


def test_7_open_render_clients_counted_by_client_id(tmp_path: Path) -> None:
    report = scenarios.open_render_clients(tmp_path).inspect()
    gpu = report.devices[0]
    assert [(c.pid, c.command, list(c.client_ids), c.fd_count) for c in gpu.clients] == [
        (2101, "ollama", [42], 1),
        (2102, "ollama", [42], 1),
        (2200, "python3", [43], 2),
    ]
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    assert report.client_scan.processes_scanned == 5  # with init and an idle bash
    # refcnt 2 = two DRM clients (42, 43): every reference is accounted for.
    assert reasons(report) == [Reason.OPEN_CLIENTS]
    assert report.blockers[0].pci_address == B580
    assert report.blockers[0].message == (
        "3 processes hold 0000:03:00.0 open (2 DRM clients): "
        "pid 2101 (ollama), 2102 (ollama), 2200 (python3)"
    )


def test_8_flex_170_display_controller_class_on_xe(tmp_path: Path) -> None:
    report = scenarios.flex_170_force_probe(tmp_path).inspect()
    assert addresses(report) == [B580]
    gpu = report.devices[0]
    assert gpu.class_code == "0x038000"
    assert gpu.platform == "Flex 170 (ATS-M150)"
    assert gpu.driver == "xe"
    assert gpu.role == pb.Device.PHYSICAL
    assert (gpu.sriov.total_vfs, gpu.sriov.num_vfs, len(gpu.sriov.vfs)) == (31, 0, 0)
    assert report.module.parameters["force_probe"] == "56c0"
    assert list(report.blockers) == []


def test_9_lunar_lake_igpu_boot_vga(tmp_path: Path) -> None:
    report = scenarios.lunar_lake_igpu(tmp_path).inspect()
    assert addresses(report) == [IGPU]
    gpu = report.devices[0]
    assert gpu.platform == "Lunar Lake"
    assert gpu.boot_vga is True
    assert gpu.role == pb.Device.STANDALONE
    assert not gpu.HasField("sriov")
    assert gpu.numa_node == -1
    assert list(report.warnings) == []


def test_10_meteor_lake_on_i915_and_battlemage_on_xe(tmp_path: Path) -> None:
    report = scenarios.meteor_lake_and_battlemage(tmp_path).inspect()
    assert [(d.pci_address, d.driver, d.platform) for d in report.devices] == [
        (IGPU, "i915", "Meteor Lake"),
        (B580, "xe", "Battlemage G21"),
    ]
    assert (report.devices[1].drm.card, report.devices[1].drm.render) == ("card1", "renderD129")
    assert list(report.blockers) == []


def test_10_a_builtin_gpu_driver_forces_the_client_scan(tmp_path: Path) -> None:
    host = scenarios.meteor_lake_and_battlemage(tmp_path)
    host.remove("sys/module/i915")
    host.add_module("i915", builtin=True)
    assert host.inspect().client_scan.state == pb.ClientScan.COMPLETE


def test_11_builtin_xe(tmp_path: Path) -> None:
    report = scenarios.builtin_xe(tmp_path).inspect()
    module = report.module
    assert module.state == pb.Module.BUILTIN
    assert not module.HasField("refcnt")
    assert module.provenance == pb.Module.IN_TREE
    assert module.parameters["max_vfs"] == "0"
    assert reasons(report) == [Reason.BUILTIN]
    # A built-in driver has no refcnt to prove it unused: the scan must run.
    assert report.client_scan.state == pb.ClientScan.COMPLETE


def test_12_unbound_gpu_with_vfio_override(tmp_path: Path) -> None:
    report = scenarios.passthrough_unbound(tmp_path).inspect()
    gpu = report.devices[0]
    assert gpu.driver == ""
    assert gpu.driver_override == "vfio-pci"
    assert not gpu.HasField("drm")
    assert list(report.blockers) == []


def test_13_unreadable_fdinfo_means_clients_unknown(tmp_path: Path) -> None:
    report = scenarios.fdinfo_unreadable(tmp_path).inspect()
    assert report.client_scan.state == pb.ClientScan.INCOMPLETE
    assert report.client_scan.processes_denied == 1
    assert Reason.CLIENTS_UNKNOWN in reasons(report)
    assert [(w.path, w.message) for w in report.warnings] == [
        ("proc/3100/fdinfo/4", "permission denied")
    ]
    unknown = next(b for b in report.blockers if b.reason == Reason.CLIENTS_UNKNOWN)
    assert "pid 3100" in unknown.message
    assert "hostPID" in unknown.message


def test_13_unreadable_fdinfo_on_disk_alone_also_means_unknown(tmp_path: Path) -> None:
    """Without the injected reader (as in a subprocess), the on-disk fault still counts."""
    scenarios.fdinfo_unreadable(tmp_path)
    report = inspect_node(tmp_path, node_name="n", now=FIXED_NOW)
    assert report.client_scan.state == pb.ClientScan.INCOMPLETE
    assert Reason.CLIENTS_UNKNOWN in reasons(report)
    assert [(w.path, w.message) for w in report.warnings] == [
        ("proc/3100/fdinfo/4", "is a directory, expected a file")
    ]


def test_14_xe_going_and_held_by_xe_vfio_pci(tmp_path: Path) -> None:
    report = scenarios.xe_going_held_by_xe_vfio_pci(tmp_path).inspect()
    assert report.module.state == pb.Module.GOING
    assert list(report.module.holders) == ["xe_vfio_pci"]
    assert reasons(report) == [Reason.TRANSITIONING, Reason.MODULE_HOLDERS]
    assert "xe_vfio_pci" in report.blockers[1].message


def test_every_fixture_scenario_has_a_builder() -> None:
    assert sorted(scenarios.SCENARIOS) == list(range(1, 15))
