"""Which of a node's reported blockers stop unloading its GPU module now: the one unload rule.

Pure, over the agent's NodeReport and three settings. The rollout (its checks and Blocked
rechecks), `gpuctl rollout plan` and the agent's own prepare planner all ask it, so they
cannot disagree. The rule:

- No report, or one that is not fresh: the node's state is unknown, and unknown is never
  safe. One blocker says why, and nothing in a stale report counts.
- MODULE_HOLDERS always blocks. KMM removes the module *first*: its unloader runs
  `modprobe -r <moduleName>` and then the rest of `kernelModule.modulesLoadingOrder` in
  list order (KMM main, worker.go :: UnloadKmod; v2.6.0 passes only moduleName and relies
  on the softdep config, which kmod also walks after the module). So a holder of xe (say
  xe_compat, which holds xe) is still loaded when xe goes, and `modprobe -r xe` fails with
  EBUSY, even when modulesLoadingOrder lists it. When it does (`unloaded_with`), the
  blocker's words say so: unload the holder first, or fix the order.
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
    # The modules KMM unloads after the module: modulesLoadingOrder after its first entry.
    # They clear nothing (a holder of the module blocks its removal all the same); they only
    # explain a MODULE_HOLDERS blocker.
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
    """The modules KMM unloads after the first one: modulesLoadingOrder after its first entry."""
    return list(modules_loading_order or [])[1:]


def reason_name(reason: int) -> str:
    try:
        return pb.Blocker.Reason.Name(reason)  # type: ignore[arg-type]
    except ValueError:
        return f"REASON_{reason}"


def module_state_name(state: int) -> str:
    """The Module.State's name; "STATE_<n>" for a number this build does not know (a newer
    agent's, or garbage): never an exception, and never LIVE or NOT_LOADED."""
    try:
        return pb.Module.State.Name(state)  # type: ignore[arg-type]
    except ValueError:
        return f"STATE_{state}"


def provenance_name(provenance: int) -> str:
    """The Module.Provenance's name; "PROVENANCE_<n>" for a number this build does not know
    (never IN_TREE or OUT_OF_TREE)."""
    try:
        return pb.Module.Provenance.Name(provenance)  # type: ignore[arg-type]
    except ValueError:
        return f"PROVENANCE_{provenance}"


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
            name = report.module.name or driver
            blocking.append(_holders(name, report.module, kept, settings.unloaded_with))
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
    name: str, module: pb.Module, blocker: UnloadBlocker, unloaded_with: Sequence[str]
) -> UnloadBlocker:
    """A MODULE_HOLDERS blocker, in words that say why listing a holder in
    modulesLoadingOrder does not help: KMM removes the module before the rest of the list."""
    listed = [holder for holder in module.holders if holder in set(unloaded_with)]
    if not listed:
        return blocker
    holders = ", ".join(module.holders)
    them = "it" if len(module.holders) == 1 else "them"
    message = (
        f"{name} is held by {holders}: KMM removes {name} first and modulesLoadingOrder's "
        f"{', '.join(listed)} only after it, so `modprobe -r {name}` fails (EBUSY); unload "
        f"{them} first, or fix the order"
    )
    return UnloadBlocker(MODULE_HOLDERS, message, blocker.pci_address)


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
