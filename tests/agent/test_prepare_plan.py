"""The preparation planner: what it changes on fake hosts and plain reports, and what it
refuses (with the exact words: pids, commands, VF addresses)."""

from __future__ import annotations

from pathlib import Path

from agent.prepare_plan import PreparePlan, plan_preparation
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost.scenarios import (
    B70_PFS,
    B580,
    arc_a770_on_i915,
    arc_b580_in_tree,
    dkms_out_of_tree,
    fdinfo_unreadable,
    host_bridge_only,
    open_render_clients,
    two_pro_b70_with_vfs,
)

VFS_OF_FIRST_PF = ("0000:03:00.1", "0000:03:00.2", "0000:03:00.3", "0000:03:00.4")


def plan(
    report: pb.NodeReport, *, allow_unbind: bool = False, allow_disable_vfs: bool = False
) -> PreparePlan:
    return plan_preparation(
        report, driver="xe", allow_unbind=allow_unbind, allow_disable_vfs=allow_disable_vfs
    )


def disabled(pf: str, count: int) -> api.NodeChange:
    return api.NodeChange(disabled_vfs=api.DisabledVfs(pci_address=pf, num_vfs=count))


def unbound(address: str) -> api.NodeChange:
    return api.NodeChange(unbound=api.UnboundFunction(pci_address=address, driver="xe"))


def reasons(plan: PreparePlan) -> list[str]:
    return [pb.Blocker.Reason.Name(b.reason) for b in plan.refusals]


def test_idle_vfs_on_xe_are_disabled_when_allowed(tmp_path: Path) -> None:
    report = two_pro_b70_with_vfs(tmp_path).inspect()
    result = plan(report, allow_disable_vfs=True)
    assert not result.refused
    assert list(result.changes) == [disabled(B70_PFS[0], 4), disabled(B70_PFS[1], 4)]


def test_with_unbinding_the_pfs_are_unbound_after_their_vfs_are_disabled(tmp_path: Path) -> None:
    report = two_pro_b70_with_vfs(tmp_path).inspect()
    result = plan(report, allow_disable_vfs=True, allow_unbind=True)
    assert list(result.changes) == [
        disabled(B70_PFS[0], 4),
        disabled(B70_PFS[1], 4),
        unbound(B70_PFS[0]),
        unbound(B70_PFS[1]),
    ]


def test_vfs_handed_to_vms_refuse_naming_each_vf(tmp_path: Path) -> None:
    for driver in ("vfio-pci", "xe-vfio-pci"):
        report = two_pro_b70_with_vfs(tmp_path / driver, vf_driver=driver).inspect()
        result = plan(report, allow_disable_vfs=True, allow_unbind=True)
        assert result.changes == ()
        assert reasons(result) == ["ACTIVE_VFS", "ACTIVE_VFS"]
        first = result.refusals[0]
        assert first.pci_address == B70_PFS[0]
        assert first.message == "cannot disable the 4 VFs of 0000:03:00.0: " + "; ".join(
            f"{vf} is bound to {driver} (handed to a VM)" for vf in VFS_OF_FIRST_PF
        )


def test_disabling_vfs_not_allowed_refuses_with_active_vfs(tmp_path: Path) -> None:
    report = two_pro_b70_with_vfs(tmp_path).inspect()
    result = plan(report, allow_unbind=True)
    assert result.changes == ()
    assert reasons(result) == ["ACTIVE_VFS", "ACTIVE_VFS"]
    assert result.refusals[1].message == (
        "0000:83:00.0 has 4 VFs enabled and the rollout does not allow disabling idle VFs "
        "(rollout.disableIdleVFs is false): set sriov_numvfs to 0 or allow it"
    )


def test_open_render_fds_refuse_naming_pids_and_commands(tmp_path: Path) -> None:
    report = open_render_clients(tmp_path).inspect()
    result = plan(report, allow_unbind=True, allow_disable_vfs=True)
    assert result.changes == ()
    assert reasons(result) == ["OPEN_CLIENTS"]
    message = result.refusals[0].message
    assert "pid 2101 (ollama), 2102 (ollama), 2200 (python3)" in message
    assert result.refusals[0].pci_address == B580


def test_unknown_clients_refuse(tmp_path: Path) -> None:
    report = fdinfo_unreadable(tmp_path).inspect()
    result = plan(report, allow_unbind=True, allow_disable_vfs=True)
    assert result.changes == ()
    assert "CLIENTS_UNKNOWN" in reasons(result)


def test_a_holder_module_refuses(tmp_path: Path) -> None:
    report = dkms_out_of_tree(tmp_path).inspect()
    result = plan(report, allow_unbind=True, allow_disable_vfs=True)
    assert result.changes == ()
    assert reasons(result) == ["MODULE_HOLDERS"]
    assert "xe_compat" in result.refusals[0].message


def test_an_idle_bound_device_is_unbound_only_when_allowed(tmp_path: Path) -> None:
    report = arc_b580_in_tree(tmp_path).inspect()
    assert list(plan(report, allow_unbind=True).changes) == [unbound(B580)]
    untouched = plan(report, allow_disable_vfs=True)
    assert (untouched.refused, untouched.changes) == (False, ())


def test_a_gpu_on_another_driver_is_left_alone_even_when_busy(tmp_path: Path) -> None:
    """Scenario 4: the A770 is i915's and Xorg holds it; unloading xe does not touch it."""
    result = plan(arc_a770_on_i915(tmp_path).inspect(), allow_unbind=True, allow_disable_vfs=True)
    assert (result.refused, result.changes) == (False, ())


def test_nothing_to_do_is_ready_without_changes(tmp_path: Path) -> None:
    result = plan(host_bridge_only(tmp_path).inspect(), allow_unbind=True, allow_disable_vfs=True)
    assert (result.refused, result.changes) == (False, ())


# -- plain reports: what no scenario shows ------------------------------------------------


def pf_report(vfs: list[pb.Device], *, num_vfs: int) -> pb.NodeReport:
    pf = pb.Device(
        pci_address="0000:03:00.0",
        driver="xe",
        role=pb.Device.PHYSICAL,
        sriov=pb.Sriov(
            total_vfs=8,
            num_vfs=num_vfs,
            vfs=[pb.VirtualFunction(pci_address=v.pci_address, driver=v.driver) for v in vfs],
        ),
    )
    blocker = pb.Blocker(
        reason=pb.Blocker.ACTIVE_VFS, message="VFs enabled", pci_address=pf.pci_address
    )
    return pb.NodeReport(devices=[pf, *vfs], blockers=[blocker])


def vf(address: str, driver: str = "xe", clients: tuple[pb.DrmClient, ...] = ()) -> pb.Device:
    return pb.Device(
        pci_address=address,
        driver=driver,
        role=pb.Device.VIRTUAL,
        physfn="0000:03:00.0",
        clients=clients,
    )


def test_a_vf_with_clients_refuses_naming_pid_and_command() -> None:
    busy = vf("0000:03:00.2", clients=(pb.DrmClient(pid=4242, command="ffmpeg"),))
    report = pf_report([vf("0000:03:00.1"), busy], num_vfs=2)
    result = plan(report, allow_disable_vfs=True, allow_unbind=True)
    assert [b.message for b in result.refusals] == [
        "cannot disable the 2 VFs of 0000:03:00.0: 0000:03:00.2 is open by pid 4242 (ffmpeg)"
    ]


def test_vfs_that_cannot_all_be_listed_or_seen_refuse() -> None:
    listed_only = pf_report([vf("0000:03:00.1")], num_vfs=3)
    listed_only.devices.pop()  # the VF's own attributes could not be read
    result = plan(listed_only, allow_disable_vfs=True)
    assert [b.message for b in result.refusals] == [
        "cannot disable the 3 VFs of 0000:03:00.0: only 1 of its 3 VFs could be listed: the "
        "others may be in use; 0000:03:00.1 could not be inspected: its clients are unknown"
    ]


def test_an_unbound_vf_is_idle_and_a_vf_on_another_driver_is_not() -> None:
    report = pf_report([vf("0000:03:00.1", driver=""), vf("0000:03:00.2")], num_vfs=2)
    result = plan(report, allow_disable_vfs=True, allow_unbind=True)
    assert list(result.changes) == [disabled("0000:03:00.0", 2), unbound("0000:03:00.0")]
    other = pf_report([vf("0000:03:00.1", driver="pci-stub")], num_vfs=1)
    assert [b.message for b in plan(other, allow_disable_vfs=True).refusals] == [
        "cannot disable the 1 VF of 0000:03:00.0: 0000:03:00.1 is bound to pci-stub, not xe"
    ]


def test_any_other_blocker_refuses_the_whole_plan() -> None:
    report = pf_report([vf("0000:03:00.1")], num_vfs=1)
    report.blockers.add(reason=pb.Blocker.STATE_UNKNOWN, message="cannot read xe's refcnt")
    result = plan(report, allow_disable_vfs=True, allow_unbind=True)
    assert result.changes == ()
    assert [b.message for b in result.refusals] == ["cannot read xe's refcnt"]


def test_a_holder_refuses_even_when_modules_loading_order_lists_it(tmp_path: Path) -> None:
    # KMM removes xe first and modulesLoadingOrder's other modules after it: xe_compat still
    # holds xe then, so `modprobe -r xe` would fail. Nothing is changed.
    report = dkms_out_of_tree(tmp_path).inspect()
    result = plan_preparation(
        report, driver="xe", allow_unbind=True, allow_disable_vfs=False, unloaded_with=["xe_compat"]
    )
    assert reasons(result) == ["MODULE_HOLDERS"]
    assert result.changes == ()
    assert "KMM removes xe first" in result.refusals[0].message


def test_every_holder_is_named_whether_listed_or_not() -> None:
    report = pb.NodeReport(
        module=pb.Module(name="xe", holders=["xe_compat", "xe_debug"]),
        blockers=[
            pb.Blocker(
                reason=pb.Blocker.MODULE_HOLDERS,
                message="xe is held by xe_compat, xe_debug: unload them first",
            )
        ],
    )
    result = plan_preparation(
        report, driver="xe", allow_unbind=True, allow_disable_vfs=True, unloaded_with=["xe_compat"]
    )
    assert reasons(result) == ["MODULE_HOLDERS"]
    assert result.refusals[0].message.startswith("xe is held by xe_compat, xe_debug: ")
    unlisted = plan_preparation(report, driver="xe", allow_unbind=True, allow_disable_vfs=True)
    assert unlisted.refusals[0].message == "xe is held by xe_compat, xe_debug: unload them first"
