"""Why unloading the module now would fail or hurt: a pure function over facts already read.

Nothing here touches the file system, so every rule is tested with plain data. A module
that is not loaded has no blockers. Anything unknown that matters to an unload (clients,
refcnt, a device's driver, active VFs) becomes a blocker itself: unknown is never "safe".
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from agent.drm_clients import ClientScanOutcome, ScanState, client_count
from agent.kmod import ModuleFacts, ModuleState
from agent.pci import GpuFunction
from agent.vfio_holders import VfioScanOutcome
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS


class BlockerReason(enum.Enum):
    OPEN_CLIENTS = "OPEN_CLIENTS"
    ACTIVE_VFS = "ACTIVE_VFS"
    MODULE_HOLDERS = "MODULE_HOLDERS"
    BUILTIN = "BUILTIN"
    TRANSITIONING = "TRANSITIONING"
    CLIENTS_UNKNOWN = "CLIENTS_UNKNOWN"
    MODULE_IN_USE = "MODULE_IN_USE"
    STATE_UNKNOWN = "STATE_UNKNOWN"


@dataclass(frozen=True, slots=True)
class BlockerFact:
    reason: BlockerReason
    message: str
    pci_address: str = ""


def _plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}es" if word.endswith("s") else f"{count} {word}s"


def compute_blockers(
    module: ModuleFacts,
    gpus: Sequence[GpuFunction],
    client_scan: ClientScanOutcome,
    *,
    pci_listed: bool = True,
    vfio_scan: VfioScanOutcome | None = None,
) -> list[BlockerFact]:
    if module.state is ModuleState.NOT_LOADED:
        return []
    name = module.name
    blockers: list[BlockerFact] = []
    if module.state is ModuleState.BUILTIN:
        blockers.append(
            BlockerFact(
                BlockerReason.BUILTIN, f"{name} is built into the kernel: it cannot be unloaded"
            )
        )
    elif module.state in (ModuleState.COMING, ModuleState.GOING):
        doing = "loading" if module.state is ModuleState.COMING else "unloading"
        blockers.append(
            BlockerFact(
                BlockerReason.TRANSITIONING,
                f"{name} is {module.state.value.lower()} ({doing} is in flight): "
                "wait for it to finish",
            )
        )
    elif module.state is ModuleState.UNKNOWN:
        blockers.append(BlockerFact(BlockerReason.STATE_UNKNOWN, f"cannot read {name}'s initstate"))
    if module.holders:
        blockers.append(
            BlockerFact(
                BlockerReason.MODULE_HOLDERS,
                f"{name} is held by {', '.join(module.holders)}: unload "
                f"{'it' if len(module.holders) == 1 else 'them'} first",
            )
        )
    if not module.holders_known:
        blockers.append(BlockerFact(BlockerReason.STATE_UNKNOWN, f"cannot list {name}'s holders"))
    if not pci_listed:
        blockers.append(
            BlockerFact(
                BlockerReason.STATE_UNKNOWN, "cannot list PCI devices: GPU bindings unknown"
            )
        )
    bound = [gpu for gpu in gpus if gpu.driver == name]
    blockers += _device_blockers(name, gpus, bound, client_scan, vfio_scan)
    blockers += _scan_blockers(module, bound, client_scan)
    return blockers


def _device_blockers(
    name: str,
    gpus: Sequence[GpuFunction],
    bound: Sequence[GpuFunction],
    client_scan: ClientScanOutcome,
    vfio_scan: VfioScanOutcome | None,
) -> list[BlockerFact]:
    blockers = [
        BlockerFact(
            BlockerReason.STATE_UNKNOWN,
            f"cannot read the driver {gpu.address} is bound to: it may be bound to {name}",
            gpu.address,
        )
        for gpu in gpus
        if gpu.driver is None
    ]
    for gpu in bound:
        clients = client_scan.clients_by_device.get(gpu.address, [])
        if clients:
            processes = ", ".join(f"{c.pid} ({c.command or '?'})" for c in clients)
            blockers.append(
                BlockerFact(
                    BlockerReason.OPEN_CLIENTS,
                    f"{_plural(len(clients), 'process')} "
                    f"{'holds' if len(clients) == 1 else 'hold'} {gpu.address} open "
                    f"({_plural(client_count(clients), 'DRM client')}): pid {processes}",
                    gpu.address,
                )
            )
        if gpu.sriov is None:
            continue
        if gpu.sriov.num_vfs is None:
            blockers.append(
                BlockerFact(
                    BlockerReason.STATE_UNKNOWN,
                    f"cannot read sriov_numvfs of {gpu.address}: active VFs unknown",
                    gpu.address,
                )
            )
        elif gpu.sriov.num_vfs > 0:
            blockers.append(
                BlockerFact(
                    BlockerReason.ACTIVE_VFS, _active_vfs_message(gpu, vfio_scan), gpu.address
                )
            )
    return blockers


def _active_vfs_message(gpu: GpuFunction, vfio_scan: VfioScanOutcome | None) -> str:
    assert gpu.sriov is not None
    described = []
    for vf in gpu.sriov.vfs:
        if vf.driver is None:
            described.append(f"{vf.address} (driver unknown)")
        elif vf.driver in VM_PASSTHROUGH_DRIVERS:
            held = _vm_holders(vf.address, vfio_scan)
            described.append(f"{vf.address} ({vf.driver}: handed to a VM{held})")
        else:
            described.append(f"{vf.address} ({vf.driver or 'no driver'})")
    num_vfs = gpu.sriov.num_vfs or 0
    listed = f": {', '.join(described)}" if described else ""
    return (
        f"{gpu.address} has {_plural(num_vfs, 'VF')} enabled{listed}; set sriov_numvfs to 0 first"
    )


def _vm_holders(address: str, vfio_scan: VfioScanOutcome | None) -> str:
    """Who holds a passthrough VF open, in words (", held by pid 4711 (qemu-kvm)"); "" when
    that is unknown."""
    if vfio_scan is None:
        return ""
    holders = vfio_scan.holders_by_device.get(address, [])
    if holders:
        return ", held by pid " + ", ".join(f"{h.pid} ({h.command or '?'})" for h in holders)
    if vfio_scan.state is ScanState.COMPLETE:
        return ", open by no process"
    if vfio_scan.state is ScanState.SKIPPED_UNUSED:
        return ", no VFIO device open"
    return ""


def _scan_blockers(
    module: ModuleFacts, bound: Sequence[GpuFunction], client_scan: ClientScanOutcome
) -> list[BlockerFact]:
    name = module.name
    if client_scan.state in (ScanState.INCOMPLETE, ScanState.FAILED):
        return [BlockerFact(BlockerReason.CLIENTS_UNKNOWN, client_scan.message)]
    if module.state is ModuleState.BUILTIN:
        return []
    if module.refcnt is None:
        return [BlockerFact(BlockerReason.STATE_UNKNOWN, f"cannot read {name}'s refcnt")]
    if not module.holders_known:
        return []
    references = module.refcnt - len(module.holders)
    clients = sum(client_count(client_scan.clients_by_device.get(gpu.address, [])) for gpu in bound)
    if references > clients:
        return [
            BlockerFact(
                BlockerReason.MODULE_IN_USE,
                f"{name} has {_plural(references, 'reference')} besides its holders "
                f"(refcnt {module.refcnt}) but only {_plural(clients, 'DRM client')} "
                "were found: a process the agent cannot see (no hostPID?) or an in-kernel "
                "user such as the framebuffer console holds it",
            )
        ]
    return []
