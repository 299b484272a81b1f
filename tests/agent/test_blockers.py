"""compute_blockers over plain data: every reason, and what its message says."""

from __future__ import annotations

from agent.blockers import BlockerFact, BlockerReason, compute_blockers
from agent.drm_clients import ClientScanOutcome, DrmClientFacts, ScanState
from agent.kmod import ModuleFacts, ModuleState
from agent.pci import GpuFunction, Role, SriovState, VirtualFunctionLink

PF = "0000:03:00.0"


def gpu(
    address: str = PF, driver: str | None = "xe", sriov: SriovState | None = None
) -> GpuFunction:
    return GpuFunction(
        address=address,
        vendor_id=0x8086,
        device_id=0xE223,
        class_code=0x030000,
        driver=driver,
        role=Role.PHYSICAL if sriov else Role.STANDALONE,
        sriov=sriov,
    )


def xe(
    state: ModuleState = ModuleState.LIVE, refcnt: int | None = 0, holders: tuple[str, ...] = ()
) -> ModuleFacts:
    return ModuleFacts(name="xe", state=state, refcnt=refcnt, holders=list(holders))


def scan(
    state: ScanState = ScanState.COMPLETE, clients: dict[str, list[DrmClientFacts]] | None = None
) -> ClientScanOutcome:
    return ClientScanOutcome(state=state, clients_by_device=clients or {}, message="scan said so")


COMPLETE = scan()


def test_not_loaded_has_no_blockers_whatever_else_is_true() -> None:
    module = xe(ModuleState.NOT_LOADED, refcnt=None, holders=("xe_compat",))
    assert compute_blockers(module, [gpu(driver=None)], scan(ScanState.FAILED)) == []


def test_idle_live_module_has_no_blockers() -> None:
    assert compute_blockers(xe(), [gpu()], COMPLETE) == []


def test_builtin() -> None:
    module = ModuleFacts(name="xe", state=ModuleState.BUILTIN)
    assert compute_blockers(module, [gpu()], COMPLETE) == [
        BlockerFact(BlockerReason.BUILTIN, "xe is built into the kernel: it cannot be unloaded")
    ]


def test_transitioning_both_ways() -> None:
    coming = compute_blockers(xe(ModuleState.COMING), [], COMPLETE)
    going = compute_blockers(xe(ModuleState.GOING), [], COMPLETE)
    assert [b.reason for b in coming + going] == [BlockerReason.TRANSITIONING] * 2
    assert "loading" in coming[0].message
    assert "unloading" in going[0].message


def test_holders_named_and_not_counted_as_unexplained_references() -> None:
    blockers = compute_blockers(
        xe(refcnt=2, holders=("xe_compat", "xe_vfio_pci")), [gpu()], COMPLETE
    )
    assert blockers == [
        BlockerFact(
            BlockerReason.MODULE_HOLDERS, "xe is held by xe_compat, xe_vfio_pci: unload them first"
        )
    ]


def test_open_clients_only_on_xe_bound_devices() -> None:
    clients = [DrmClientFacts(7, "Xorg", {1}, 1)]
    i915 = gpu("0000:00:02.0", driver="i915")
    blockers = compute_blockers(
        xe(refcnt=1), [i915, gpu()], scan(clients={"0000:00:02.0": clients, PF: clients})
    )
    assert blockers == [
        BlockerFact(
            BlockerReason.OPEN_CLIENTS,
            "1 process holds 0000:03:00.0 open (1 DRM client): pid 7 (Xorg)",
            PF,
        )
    ]


def test_active_vfs_call_out_the_ones_handed_to_vms() -> None:
    sriov = SriovState(
        total_vfs=8,
        num_vfs=3,
        drivers_autoprobe=True,
        vf_device_id="0xe223",
        vfs=[
            VirtualFunctionLink("0000:03:00.1", "xe"),
            VirtualFunctionLink("0000:03:00.2", "vfio-pci"),
            VirtualFunctionLink("0000:03:00.3", ""),
        ],
    )
    assert compute_blockers(xe(), [gpu(sriov=sriov)], COMPLETE) == [
        BlockerFact(
            BlockerReason.ACTIVE_VFS,
            "0000:03:00.0 has 3 VFs enabled: 0000:03:00.1 (xe), 0000:03:00.2 (vfio-pci: handed "
            "to a VM), 0000:03:00.3 (no driver); set sriov_numvfs to 0 first",
            PF,
        )
    ]


def test_pf_without_active_vfs_or_bound_elsewhere_is_no_blocker() -> None:
    idle = SriovState(total_vfs=8, num_vfs=0, drivers_autoprobe=True, vf_device_id="0xe223")
    busy = SriovState(total_vfs=8, num_vfs=2, drivers_autoprobe=True, vf_device_id="0xe223")
    assert (
        compute_blockers(xe(), [gpu(sriov=idle), gpu("0000:83:00.0", "vfio-pci", busy)], COMPLETE)
        == []
    )


def test_clients_unknown_when_the_scan_was_incomplete_or_failed() -> None:
    for state in (ScanState.INCOMPLETE, ScanState.FAILED):
        assert compute_blockers(xe(refcnt=5), [gpu()], scan(state)) == [
            BlockerFact(BlockerReason.CLIENTS_UNKNOWN, "scan said so")
        ]


def test_module_in_use_when_references_exceed_distinct_clients() -> None:
    # Two processes share client 42: one client, one reference. refcnt 3 - 1 holder = 2 > 1.
    clients = [DrmClientFacts(10, "ollama", {42}, 1), DrmClientFacts(11, "ollama", {42}, 1)]
    blockers = compute_blockers(
        xe(refcnt=3, holders=("xe_compat",)), [gpu()], scan(clients={PF: clients})
    )
    assert [b.reason for b in blockers] == [
        BlockerReason.MODULE_HOLDERS,
        BlockerReason.OPEN_CLIENTS,
        BlockerReason.MODULE_IN_USE,
    ]
    assert blockers[2].message.startswith(
        "xe has 2 references besides its holders (refcnt 3) but only 1 DRM client"
    )


def test_references_matching_clients_are_not_module_in_use() -> None:
    clients = [DrmClientFacts(10, "a", {1}, 1), DrmClientFacts(11, "b", {2, 3}, 2)]
    blockers = compute_blockers(xe(refcnt=3), [gpu()], scan(clients={PF: clients}))
    assert [b.reason for b in blockers] == [BlockerReason.OPEN_CLIENTS]


def test_state_unknown_for_unreadable_refcnt_driver_and_numvfs() -> None:
    unknown_vfs = SriovState(total_vfs=8, num_vfs=None, drivers_autoprobe=True, vf_device_id="")
    blockers = compute_blockers(
        xe(refcnt=None), [gpu("0000:00:02.0", driver=None), gpu(sriov=unknown_vfs)], COMPLETE
    )
    assert [(b.reason, b.pci_address) for b in blockers] == [
        (BlockerReason.STATE_UNKNOWN, "0000:00:02.0"),
        (BlockerReason.STATE_UNKNOWN, PF),
        (BlockerReason.STATE_UNKNOWN, ""),
    ]
    assert blockers[2].message == "cannot read xe's refcnt"


def test_unlisted_pci_devices_block() -> None:
    blockers = compute_blockers(xe(), [], COMPLETE, pci_listed=False)
    assert [b.reason for b in blockers] == [BlockerReason.STATE_UNKNOWN]
