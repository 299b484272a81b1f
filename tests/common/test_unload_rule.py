"""The shared unload rule (gpuctl/common/unload_rule.py): which reported blockers stop an
unload now, and what preparation would clear (a holder module never is: KMM removes the module
before the rest of its list)."""

from __future__ import annotations

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.unload_rule import (
    UNKNOWN_STATE,
    ActiveVfs,
    IdleVfs,
    UnloadBlocker,
    UnloadSettings,
    module_state_name,
    modules_unloaded_with,
    unload_verdict,
)

PF = "0000:03:00.0"
VF = "0000:03:00.1"
VFS_WORDS = f"{PF} has 1 VF enabled: {VF} (xe); set sriov_numvfs to 0 first"
XE = UnloadSettings(driver="xe")
MAY_DISABLE = UnloadSettings(driver="xe", disable_idle_vfs=True)


def _report() -> pb.NodeReport:
    return pb.NodeReport(module=pb.Module(name="xe", state=pb.Module.LIVE))


def _pf_with_a_vf(
    vf_driver: str, *, clients: tuple[pb.DrmClient, ...] = (), num_vfs: int = 1
) -> pb.NodeReport:
    """A PF with VFs enabled (one listed, bound to `vf_driver`) and the agent's ACTIVE_VFS."""
    report = _report()
    listed = [pb.VirtualFunction(pci_address=VF, driver=vf_driver)]
    report.devices.add(
        pci_address=PF,
        driver="xe",
        role=pb.Device.PHYSICAL,
        sriov=pb.Sriov(total_vfs=8, num_vfs=num_vfs, vfs=listed),
    )
    report.devices.add(
        pci_address=VF, driver=vf_driver, role=pb.Device.VIRTUAL, physfn=PF, clients=clients
    )
    report.blockers.add(reason=pb.Blocker.ACTIVE_VFS, message=VFS_WORDS, pci_address=PF)
    return report


def _held_by(*holders: str) -> pb.NodeReport:
    report = _report()
    report.module.holders.extend(holders)
    report.blockers.add(
        reason=pb.Blocker.MODULE_HOLDERS, message=f"xe is held by {', '.join(holders)}: unload"
    )
    return report


# -- VFs ----------------------------------------------------------------------------------


def test_idle_vfs_on_the_host_are_cleared_only_when_disabling_them_is_allowed() -> None:
    report = _pf_with_a_vf("xe")
    refused = unload_verdict(report, XE)
    assert refused.blocking == (UnloadBlocker("ACTIVE_VFS", VFS_WORDS, PF),)
    assert (refused.notes, refused.disable_vfs) == ((), ())
    allowed = unload_verdict(report, MAY_DISABLE)
    assert allowed.clear
    assert allowed.notes == (f"would disable the idle VFs of {PF}, then restore them",)
    assert allowed.disable_vfs == (IdleVfs(PF, 1),)
    assert allowed.active_vfs == (ActiveVfs(PF, 1, ()),)


def test_an_unbound_vf_is_idle() -> None:
    assert unload_verdict(_pf_with_a_vf(""), MAY_DISABLE).clear


def test_a_vf_handed_to_a_vm_blocks_even_when_disabling_is_allowed() -> None:
    for driver in ("vfio-pci", "xe-vfio-pci"):
        verdict = unload_verdict(_pf_with_a_vf(driver), MAY_DISABLE)
        assert verdict.messages() == [VFS_WORDS]
        assert verdict.vfs_of(PF) == ActiveVfs(
            PF, 1, (f"{VF} is bound to {driver} (handed to a VM)",)
        )
        assert verdict.disable_vfs == ()


def test_a_vf_bound_to_another_driver_such_as_i915_blocks() -> None:
    verdict = unload_verdict(_pf_with_a_vf("i915"), MAY_DISABLE)
    assert verdict.messages() == [VFS_WORDS]
    assert verdict.vfs_of(PF) == ActiveVfs(PF, 1, (f"{VF} is bound to i915, not xe",))


def test_a_vf_with_open_clients_blocks() -> None:
    busy = _pf_with_a_vf("xe", clients=(pb.DrmClient(pid=4242, command="ffmpeg"),))
    verdict = unload_verdict(busy, MAY_DISABLE)
    assert not verdict.clear
    assert verdict.vfs_of(PF) == ActiveVfs(PF, 1, (f"{VF} is open by pid 4242 (ffmpeg)",))


def test_vfs_that_cannot_all_be_listed_or_a_pf_without_sriov_numvfs_block() -> None:
    unlisted = unload_verdict(_pf_with_a_vf("xe", num_vfs=2), MAY_DISABLE)
    assert not unlisted.clear
    vfs = unlisted.vfs_of(PF)
    assert vfs is not None
    assert vfs.problems[0].startswith("only 1 of its 2 VFs could be listed")
    unknown = _pf_with_a_vf("xe")
    unknown.devices[0].sriov.ClearField("num_vfs")
    verdict = unload_verdict(unknown, MAY_DISABLE)
    assert verdict.messages() == [VFS_WORDS]
    assert verdict.vfs_of(PF) == ActiveVfs(PF, None)


def test_the_driver_defaults_to_the_reports_module() -> None:
    report = _pf_with_a_vf("xe")
    assert unload_verdict(report, UnloadSettings(disable_idle_vfs=True)).clear
    other = UnloadSettings(driver="xe_other", disable_idle_vfs=True)
    assert not unload_verdict(report, other).clear


# -- holders ------------------------------------------------------------------------------


def test_a_holder_blocks_even_when_modules_loading_order_lists_it() -> None:
    # KMM removes xe first and the rest of modulesLoadingOrder after it (worker.go ::
    # UnloadKmod): a holder of xe is still there when xe goes, so `modprobe -r xe` fails.
    report = _held_by("xe_compat")
    assert unload_verdict(report, XE).messages() == ["xe is held by xe_compat: unload"]
    verdict = unload_verdict(report, UnloadSettings(unloaded_with=("xe_compat", "drm_buddy")))
    assert not verdict.clear
    assert verdict.messages() == [
        "xe is held by xe_compat: KMM removes xe first and modulesLoadingOrder's xe_compat "
        "only after it, so `modprobe -r xe` fails (EBUSY); unload it first, or fix the order"
    ]
    assert verdict.notes == ()


def test_holders_some_listed_and_some_not_block_naming_all() -> None:
    verdict = unload_verdict(
        _held_by("xe_compat", "xe_debug"), UnloadSettings(unloaded_with=("xe_compat",))
    )
    assert verdict.blocking == (
        UnloadBlocker(
            "MODULE_HOLDERS",
            "xe is held by xe_compat, xe_debug: KMM removes xe first and modulesLoadingOrder's "
            "xe_compat only after it, so `modprobe -r xe` fails (EBUSY); unload them first, or "
            "fix the order",
        ),
    )


def test_a_holders_blocker_without_the_holders_listed_stays() -> None:
    report = _report()
    report.blockers.add(reason=pb.Blocker.MODULE_HOLDERS, message="xe is held")
    assert unload_verdict(report, UnloadSettings(unloaded_with=("xe_compat",))).messages() == [
        "xe is held"
    ]


def test_the_modules_unloaded_with() -> None:
    assert modules_unloaded_with(["xe", "xe_compat", "drm_buddy"]) == ["xe_compat", "drm_buddy"]
    assert modules_unloaded_with(None) == []


# -- everything else, and unknown ---------------------------------------------------------


def test_other_blockers_stay_in_the_agents_words_in_order() -> None:
    report = _pf_with_a_vf("xe")
    report.blockers.add(reason=pb.Blocker.OPEN_CLIENTS, message="pid 42 (ollama)", pci_address=PF)
    report.blockers.add(reason=42)
    verdict = unload_verdict(report, MAY_DISABLE)
    assert verdict.blocking == (
        UnloadBlocker("OPEN_CLIENTS", "pid 42 (ollama)", PF),
        UnloadBlocker("REASON_42", "REASON_42"),
    )


def test_no_report_or_a_stale_one_is_unknown_and_blocks() -> None:
    missing = unload_verdict(None, XE)
    assert missing.blocking == (
        UnloadBlocker(UNKNOWN_STATE, "no agent report (unknown is never safe)"),
    )
    assert missing.blocking[0].unknown
    stale = unload_verdict(_report(), MAY_DISABLE, not_fresh="agent report is stale")
    assert stale.messages() == ["agent report is stale (unknown is never safe)"]
    assert unload_verdict(None, XE, not_fresh="agent disconnected").messages() == [
        "agent disconnected (unknown is never safe)"
    ]
    assert unload_verdict(_report(), XE).clear


def test_an_unknown_module_state_has_a_name_and_is_neither_live_nor_unloaded() -> None:
    """Found by fuzzing (bench/fuzz/regressions/agent_message): Module.State 96 (a newer
    agent's, or garbage) made the rollout's report facts, the GPUNode status and the CLI's
    tables raise ValueError."""
    assert module_state_name(96) == "STATE_96"
    assert module_state_name(pb.Module.LIVE) == "LIVE"
    assert module_state_name(96) not in ("LIVE", "NOT_LOADED")
