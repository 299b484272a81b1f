"""Decide what preparing a node for an unload would change, or why it must change nothing.

Pure: the input is a NodeReport inspected just now (never a cached one) and what the
PrepareRequest allows; the output is either refusals (blockers in precise words, nothing to
be changed) or the ordered changes. Rules:

- Every blocker that preparation cannot clear refuses: OPEN_CLIENTS, CLIENTS_UNKNOWN,
  MODULE_HOLDERS, BUILTIN, TRANSITIONING, MODULE_IN_USE, STATE_UNKNOWN (anything unknown).
- MODULE_HOLDERS does not refuse when every holder is one the unload removes first
  (`unloaded_with`: KMM unloads modulesLoadingOrder in reverse); otherwise it refuses naming
  only the holders the unload leaves in place.
- ACTIVE_VFS refuses when disabling VFs is not allowed, when any VF of the PF is handed to a
  VM (vfio-pci, xe-vfio-pci) or bound to another driver, has open clients, cannot be seen,
  or when fewer VFs are listed than `sriov_numvfs` says; otherwise it plans DisabledVfs.
- With `allow_unbind`, every function still bound to the module's driver after those VFs
  are gone is unbound (left-over VFs first, then PFs and standalone functions). It is idle:
  a function with clients refused above.
- Nothing to change and nothing refused: ready as is (an idle bound device unloads fine).

Refusals name only what preparation cannot clear: the admin learns what to stop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.module_holders import holders_unloaded_with
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS

DISABLE_VFS_SETTING = "rollout.disableIdleVFs"


@dataclass(frozen=True)
class PreparePlan:
    # Why nothing may be changed; empty when the plan may run.
    refusals: tuple[pb.Blocker, ...]
    # What to change, in order (empty when refused or when nothing needs changing).
    changes: tuple[api.NodeChange, ...]

    @property
    def refused(self) -> bool:
        return bool(self.refusals)


def remaining_blockers(
    report: pb.NodeReport, unloaded_with: Sequence[str] = ()
) -> list[pb.Blocker]:
    """The report's blockers once the modules unloaded with the module are accounted for.

    A MODULE_HOLDERS blocker whose holders are all in `unloaded_with` is dropped; one with
    other holders too is kept, reworded to name only those. The rest are kept as they are.
    """
    out = []
    for blocker in report.blockers:
        if blocker.reason != pb.Blocker.MODULE_HOLDERS or not report.module.holders:
            out.append(blocker)
            continue
        still = holders_unloaded_with(report.module.holders, unloaded_with)
        if len(still) == len(report.module.holders):
            out.append(blocker)
        elif still:
            out.append(_holders_refusal(report.module.name, still))
    return out


def _holders_refusal(module: str, holders: Sequence[str]) -> pb.Blocker:
    message = (
        f"{module} is held by {', '.join(holders)}, which the unload does not remove: unload "
        f"{'it' if len(holders) == 1 else 'them'} first"
    )
    return pb.Blocker(reason=pb.Blocker.MODULE_HOLDERS, message=message)


def plan_preparation(
    report: pb.NodeReport,
    *,
    driver: str,
    allow_unbind: bool,
    allow_disable_vfs: bool,
    unloaded_with: Sequence[str] = (),
) -> PreparePlan:
    """The plan for unloading the module whose PCI driver is `driver` on the reported node.

    `unloaded_with` names the modules the unload removes before the module itself.
    """
    devices = {device.pci_address: device for device in report.devices}
    refusals = [
        b for b in remaining_blockers(report, unloaded_with) if b.reason != pb.Blocker.ACTIVE_VFS
    ]
    disable: list[api.NodeChange] = []
    for blocker in report.blockers:
        if blocker.reason != pb.Blocker.ACTIVE_VFS:
            continue
        refusal, change = _judge_active_vfs(blocker, devices, driver, allow_disable_vfs)
        if refusal is not None:
            refusals.append(refusal)
        if change is not None:
            disable.append(change)
    if refusals:
        return PreparePlan(tuple(refusals), ())
    unbind = _unbinds(report.devices, driver, {c.disabled_vfs.pci_address for c in disable})
    return PreparePlan((), tuple(disable + (unbind if allow_unbind else [])))


def _judge_active_vfs(
    blocker: pb.Blocker,
    devices: Mapping[str, pb.Device],
    driver: str,
    allow_disable_vfs: bool,
) -> tuple[pb.Blocker | None, api.NodeChange | None]:
    pf = devices.get(blocker.pci_address)
    if pf is None or not pf.sriov.HasField("num_vfs"):
        return blocker, None
    count = pf.sriov.num_vfs
    if not allow_disable_vfs:
        message = (
            f"{pf.pci_address} has {_vfs(count)} enabled and the rollout does not allow "
            f"disabling idle VFs ({DISABLE_VFS_SETTING} is false): set sriov_numvfs to 0 "
            "or allow it"
        )
        return _refusal(message, pf.pci_address), None
    problems = _vf_problems(pf, devices, driver)
    if problems:
        message = f"cannot disable the {_vfs(count)} of {pf.pci_address}: " + "; ".join(problems)
        return _refusal(message, pf.pci_address), None
    change = api.NodeChange(disabled_vfs=api.DisabledVfs(pci_address=pf.pci_address, num_vfs=count))
    return None, change


def _vf_problems(pf: pb.Device, devices: Mapping[str, pb.Device], driver: str) -> list[str]:
    """Why the PF's VFs are not all idle and bound to `driver` (or unbound), in words."""
    problems = []
    listed = pf.sriov.vfs
    if len(listed) != pf.sriov.num_vfs:
        problems.append(
            f"only {len(listed)} of its {pf.sriov.num_vfs} VFs could be listed: the others "
            "may be in use"
        )
    for vf in listed:
        device = devices.get(vf.pci_address)
        bound = device.driver if device is not None else vf.driver
        if bound in VM_PASSTHROUGH_DRIVERS:
            problems.append(f"{vf.pci_address} is bound to {bound} (handed to a VM)")
        elif bound not in ("", driver):
            problems.append(f"{vf.pci_address} is bound to {bound}, not {driver}")
        if device is None:
            problems.append(f"{vf.pci_address} could not be inspected: its clients are unknown")
        elif device.clients:
            holders = ", ".join(f"pid {c.pid} ({c.command or '?'})" for c in device.clients)
            problems.append(f"{vf.pci_address} is open by {holders}")
    return problems


def _unbinds(
    devices: Sequence[pb.Device], driver: str, disabled_pfs: set[str]
) -> list[api.NodeChange]:
    """Functions bound to `driver` that stay after the planned VF disables: VFs first."""
    staying = [
        device
        for device in devices
        if device.driver == driver
        and not (device.role == pb.Device.VIRTUAL and device.physfn in disabled_pfs)
    ]
    staying.sort(key=lambda device: (device.role != pb.Device.VIRTUAL, device.pci_address))
    return [
        api.NodeChange(unbound=api.UnboundFunction(pci_address=device.pci_address, driver=driver))
        for device in staying
    ]


def _refusal(message: str, address: str) -> pb.Blocker:
    return pb.Blocker(reason=pb.Blocker.ACTIVE_VFS, message=message, pci_address=address)


def _vfs(count: int) -> str:
    return "1 VF" if count == 1 else f"{count} VFs"
