"""Decide what preparing a node for an unload would change, or why it must change nothing.

Pure: the input is a NodeReport inspected just now (never a cached one) and what the
PrepareRequest allows; the output is either refusals (blockers in precise words, nothing to
be changed) or the ordered changes. Which blockers preparation clears is the shared unload
rule's answer (gpuctl.common.unload_rule), the same one the coordinator and the CLI ask:

- Every blocker that preparation cannot clear refuses: OPEN_CLIENTS, CLIENTS_UNKNOWN,
  MODULE_HOLDERS, BUILTIN, TRANSITIONING, MODULE_IN_USE, STATE_UNKNOWN (anything unknown).
- MODULE_HOLDERS always refuses: KMM removes the module before the rest of
  modulesLoadingOrder, so a holder listed there (`unloaded_with`) still holds it then; the
  refusal says so.
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

from collections.abc import Sequence
from dataclasses import dataclass

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.unload_rule import (
    ACTIVE_VFS,
    UnloadBlocker,
    UnloadSettings,
    UnloadVerdict,
    unload_verdict,
)

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
    """The report's blockers as the unload rule words them.

    A MODULE_HOLDERS blocker with a holder in `unloaded_with` is reworded to say why listing
    it in modulesLoadingOrder does not help. The rest are kept as they are.
    """
    verdict = unload_verdict(report, UnloadSettings(unloaded_with=tuple(unloaded_with)))
    return [_as_proto(blocker) for blocker in verdict.blocking]


def plan_preparation(
    report: pb.NodeReport,
    *,
    driver: str,
    allow_unbind: bool,
    allow_disable_vfs: bool,
    unloaded_with: Sequence[str] = (),
) -> PreparePlan:
    """The plan for unloading the module whose PCI driver is `driver` on the reported node.

    `unloaded_with` names the modules KMM's unload removes after the module itself.
    """
    settings = UnloadSettings(driver, allow_disable_vfs, tuple(unloaded_with))
    verdict = unload_verdict(report, settings)
    refusals = [_as_proto(b) for b in verdict.blocking if b.reason != ACTIVE_VFS]
    refusals += [
        _vfs_refusal(b, verdict, allow_disable_vfs)
        for b in verdict.blocking
        if b.reason == ACTIVE_VFS
    ]
    if refusals:
        return PreparePlan(tuple(refusals), ())
    disable = [
        api.NodeChange(disabled_vfs=api.DisabledVfs(pci_address=vfs.pf, num_vfs=vfs.num_vfs))
        for vfs in verdict.disable_vfs
    ]
    unbind = _unbinds(report.devices, driver, {vfs.pf for vfs in verdict.disable_vfs})
    return PreparePlan((), tuple(disable + (unbind if allow_unbind else [])))


def _as_proto(blocker: UnloadBlocker) -> pb.Blocker:
    return pb.Blocker(
        reason=pb.Blocker.Reason.Value(blocker.reason),
        message=blocker.message,
        pci_address=blocker.pci_address,
    )


def _vfs_refusal(
    blocker: UnloadBlocker, verdict: UnloadVerdict, allow_disable_vfs: bool
) -> pb.Blocker:
    """Why the VFs of an ACTIVE_VFS blocker's PF stay, in words."""
    vfs = verdict.vfs_of(blocker.pci_address)
    if vfs is None or vfs.num_vfs is None:
        return _as_proto(blocker)
    if not allow_disable_vfs:
        message = (
            f"{vfs.pf} has {_vfs(vfs.num_vfs)} enabled and the rollout does not allow "
            f"disabling idle VFs ({DISABLE_VFS_SETTING} is false): set sriov_numvfs to 0 "
            "or allow it"
        )
        return _refusal(message, vfs.pf)
    message = f"cannot disable the {_vfs(vfs.num_vfs)} of {vfs.pf}: " + "; ".join(vfs.problems)
    return _refusal(message, vfs.pf)


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
