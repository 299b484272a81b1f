"""Which of a node's reported blockers stop unloading its GPU module now: the one unload rule.

Pure, over the agent's NodeReport and three settings. The rollout (its checks and Blocked
rechecks), `gpuctl rollout plan` and the agent's own prepare planner all ask it, so they
cannot disagree. The rule:

- No report, or one that is not fresh: the node's state is unknown, and unknown is never
  safe. One blocker says why, and nothing in a stale report counts.
- MODULE_HOLDERS: KMM unloads `kernelModule.modulesLoadingOrder` in reverse, so with
  `[xe, xe_compat]` xe_compat is removed before xe. Holders listed after the module
  (`unloaded_with`) are gone by then: when all of them are, the blocker goes (a note says
  KMM unloads them first); when only some are, it stays and names only the others.
- ACTIVE_VFS: preparation may disable a PF's VFs (the rollout restores them afterwards) only
  when `disable_idle_vfs` allows it and every VF is idle on the host: as many listed as
  `sriov_numvfs` says, each visible, unbound or bound to the module's driver (not handed to
  a VM, not bound to any other driver such as i915), and without open clients. Then the
  blocker goes (a note says the VFs would be disabled); otherwise it stays.
- Every other blocker stays.

Blockers keep the agent's words and reason names; a blocker without words is named by its
reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS

UNKNOWN_STATE = "NodeStateUnknown"
NO_REPORT = "no agent report"
ACTIVE_VFS = "ACTIVE_VFS"
MODULE_HOLDERS = "MODULE_HOLDERS"


@dataclass(frozen=True)
class UnloadSettings:
    """What may clear a blocker before the unload."""

    # The module's PCI driver (the module's name, e.g. "xe"); "" means the report's module.
    driver: str = ""
    # Preparation may disable idle VFs (spec.rollout.disableIdleVFs). Off where nothing
    # prepares the node.
    disable_idle_vfs: bool = False
    # The modules KMM unloads before the module: modulesLoadingOrder after its first entry.
    unloaded_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnloadBlocker:
    """One reason the unload cannot happen now."""

    # The Blocker.Reason name ("REASON_<n>" for one this build does not know), or
    # UNKNOWN_STATE when the node's state is unknown.
    reason: str
    # The agent's words (pids and commands, VF addresses); for UNKNOWN_STATE, why.
    message: str
    pci_address: str = ""

    @property
    def unknown(self) -> bool:
        return self.reason == UNKNOWN_STATE


@dataclass(frozen=True)
class ActiveVfs:
    """One ACTIVE_VFS blocker's PF, judged: could preparation disable its VFs?"""

    pf: str
    # sriov_numvfs; None when the PF or its sriov_numvfs is not in the report.
    num_vfs: int | None
    # Why its VFs are not all idle on the host, in the agent's words (empty when they are).
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class IdleVfs:
    """A PF whose VFs are all idle on the host: allowed preparation disables them."""

    pf: str
    num_vfs: int


@dataclass(frozen=True)
class UnloadVerdict:
    """What stops the unload now, and what allowed preparation or KMM itself would clear."""

    blocking: tuple[UnloadBlocker, ...] = ()
    notes: tuple[str, ...] = ()
    # Every ACTIVE_VFS blocker's PF, judged, in the report's order.
    active_vfs: tuple[ActiveVfs, ...] = ()
    # The PFs whose idle VFs allowed preparation disables, in the report's order.
    disable_vfs: tuple[IdleVfs, ...] = ()

    @property
    def clear(self) -> bool:
        return not self.blocking

    def messages(self) -> list[str]:
        return [blocker.message for blocker in self.blocking]

    def vfs_of(self, pf: str) -> ActiveVfs | None:
        return next((vfs for vfs in self.active_vfs if vfs.pf == pf), None)


def modules_unloaded_with(modules_loading_order: Sequence[str] | None) -> list[str]:
    """The modules KMM unloads before the first one: modulesLoadingOrder after its first entry."""
    return list(modules_loading_order or [])[1:]


def holders_left(holders: Sequence[str], unloaded_with: Sequence[str]) -> list[str]:
    """The holders (in their order) the unload leaves in place: those not in `unloaded_with`."""
    removed = set(unloaded_with)
    return [holder for holder in holders if holder not in removed]


def reason_name(reason: int) -> str:
    try:
        return pb.Blocker.Reason.Name(reason)  # type: ignore[arg-type]
    except ValueError:
        return f"REASON_{reason}"


def unknown_state(why: str) -> UnloadVerdict:
    """The verdict on a node whose state is unknown (`why`, in words): blocked."""
    return UnloadVerdict(blocking=(UnloadBlocker(UNKNOWN_STATE, f"{why} (unknown is never safe)"),))


def unload_verdict(
    report: pb.NodeReport | None, settings: UnloadSettings, *, not_fresh: str = ""
) -> UnloadVerdict:
    """The verdict on unloading the module `report` describes, under `settings`.

    `not_fresh` says why the report cannot be trusted now ("" when it is fresh); with it, or
    without a report, the node's state is unknown.
    """
    if report is None:
        return unknown_state(not_fresh or NO_REPORT)
    if not_fresh:
        return unknown_state(not_fresh)
    driver = settings.driver or report.module.name
    devices = {device.pci_address: device for device in report.devices}
    blocking: list[UnloadBlocker] = []
    notes: list[str] = []
    judged: list[ActiveVfs] = []
    disable: list[IdleVfs] = []
    for blocker in report.blockers:
        reason = reason_name(blocker.reason)
        kept = UnloadBlocker(reason, blocker.message or reason, blocker.pci_address)
        if reason == MODULE_HOLDERS and report.module.holders:
            left, note = _holders(report.module, kept, settings.unloaded_with)
            blocking.extend([left] if left is not None else [])
            notes.extend([note] if note else [])
            continue
        if reason == ACTIVE_VFS:
            vfs = _judge_vfs(blocker.pci_address, devices, driver)
            judged.append(vfs)
            if settings.disable_idle_vfs and vfs.num_vfs is not None and not vfs.problems:
                disable.append(IdleVfs(vfs.pf, vfs.num_vfs))
                notes.append(f"would disable the idle VFs of {vfs.pf}, then restore them")
                continue
        blocking.append(kept)
    return UnloadVerdict(tuple(blocking), tuple(notes), tuple(judged), tuple(disable))


def _holders(
    module: pb.Module, blocker: UnloadBlocker, unloaded_with: Sequence[str]
) -> tuple[UnloadBlocker | None, str]:
    """A MODULE_HOLDERS blocker once KMM's unload of `unloaded_with` is counted (None when
    it is gone), and the note saying why it is gone."""
    holders = list(module.holders)
    left = holders_left(holders, unloaded_with)
    if not left:
        return None, f"KMM unloads {', '.join(holders)} first (modulesLoadingOrder)"
    if len(left) == len(holders):
        return blocker, ""
    message = (
        f"{module.name} is held by {', '.join(left)}, which the unload does not remove: unload "
        f"{'it' if len(left) == 1 else 'them'} first"
    )
    return UnloadBlocker(MODULE_HOLDERS, message, blocker.pci_address), ""


def _judge_vfs(address: str, devices: Mapping[str, pb.Device], driver: str) -> ActiveVfs:
    pf = devices.get(address)
    if pf is None or not pf.sriov.HasField("num_vfs"):
        return ActiveVfs(address, None)
    return ActiveVfs(address, pf.sriov.num_vfs, tuple(_vf_problems(pf, devices, driver)))


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
