"""Find the processes holding GPU functions that are handed to a VM (vfio-pci, xe-vfio-pci).

A VF passed through to a virtual machine is held by the VM's process (QEMU, in KubeVirt its
virt-launcher pod) through VFIO: the legacy group file `/dev/vfio/<iommu group>` (sysfs
`iommu_group` link of the function) or the iommufd device file `/dev/vfio/devices/vfioN`
(sysfs `vfio-dev/vfioN`); with VFIO's unsafe no-IOMMU mode the kernel names them
`/dev/vfio/noiommu-<group>` and `/dev/vfio/devices/noiommu-vfioN` (drivers/vfio/group.c
`vfio_create_group`, vfio_main.c `__vfio_register_dev`). The kernel keeps no list of who
opened them, unlike DRM's debugfs client lists, so this sweeps every /proc/<pid>/fd
(`fdscan.find_fd_holders`) for those paths, and names each holder's pod from its cgroup as
the DRM scan does.

The sweep is skipped when no GPU is bound to a passthrough driver, or when every such
driver's module holds no reference: VFIO takes a reference on the bound driver's module for
each device a process opens, so none means no VM uses one now. An unknown binding, an
unreadable refcnt or IOMMU group, or a process whose fds cannot be read make the holders
unknown (INCOMPLETE or FAILED), never "no holders".

A group file names every function of its IOMMU group: its holders are counted for each of
the group's passthrough functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.cgroup_owner import ProcessOwner
from agent.drm_clients import ScanState
from agent.fdscan import OS_SYSCALLS, ProcSyscalls, find_fd_holders
from agent.hostfs import HostFiles
from agent.kmod import driver_module_name, open_references
from agent.pci import PCI_DEVICES_DIR, GpuFunction
from agent.process_facts import denied_words, read_command, read_owner
from agent.warninglog import WarningLog, describe_error
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS

VFIO_GROUP_DIR = "/dev/vfio/"
VFIO_DEVICE_DIR = "/dev/vfio/devices/"
NO_IOMMU_PREFIX = "noiommu-"


@dataclass(slots=True)
class VfioHolderFacts:
    pid: int
    command: str
    # The VFIO files of the function it holds ("/dev/vfio/12").
    paths: list[str] = field(default_factory=list)
    fd_count: int = 0
    owner: ProcessOwner | None = None


@dataclass(slots=True)
class VfioScanOutcome:
    state: ScanState
    # PCI address -> the processes holding that function's VFIO files, in pid order.
    holders_by_device: dict[str, list[VfioHolderFacts]] = field(default_factory=dict)
    # PCI address -> its IOMMU group ("12"), for every passthrough function whose group
    # could be read.
    iommu_groups: dict[str, str] = field(default_factory=dict)
    processes_scanned: int = 0
    processes_denied: int = 0
    message: str = ""


def passthrough_functions(gpus: Iterable[GpuFunction]) -> list[GpuFunction]:
    return [gpu for gpu in gpus if gpu.driver in VM_PASSTHROUGH_DRIVERS]


def scan_vfio_holders(
    files: HostFiles,
    gpus: Iterable[GpuFunction],
    log: WarningLog,
    *,
    syscalls: ProcSyscalls = OS_SYSCALLS,
) -> VfioScanOutcome:
    """Who holds each GPU function bound to a passthrough driver open, through VFIO."""
    handed = passthrough_functions(gpus)
    if not handed:
        return VfioScanOutcome(ScanState.SKIPPED_UNUSED, message="no GPU is handed to a VM")
    outcome = VfioScanOutcome(ScanState.COMPLETE)
    paths_by_device = {gpu.address: _vfio_paths(files, gpu, log, outcome) for gpu in handed}
    unknown = sorted(a for a, paths in paths_by_device.items() if paths is None)
    if not unknown and _none_open(files, handed, log):
        outcome.state = ScanState.SKIPPED_UNUSED
        outcome.message = "no VFIO device is open: the passthrough drivers hold no reference"
        return outcome
    devices_by_path: dict[str, list[str]] = {}
    for address, paths in paths_by_device.items():
        for path in paths or ():
            devices_by_path.setdefault(path, []).append(address)
    try:
        fd_scan = find_fd_holders(files.path("proc"), devices_by_path, syscalls=syscalls)
    except OSError as error:
        log.add_error("proc", error)
        outcome.state = ScanState.FAILED
        outcome.message = f"cannot read /proc ({describe_error(error)}): VM holders are unknown"
        return outcome
    for pid, held in sorted(fd_scan.holders.items()):
        command = read_command(files, pid, log)
        if command is None:  # exited since its fds were read
            continue
        owner = read_owner(files, pid)
        for address in sorted({a for _, path in held for a in devices_by_path[path]}):
            mine = [path for _, path in held if address in devices_by_path[path]]
            facts = VfioHolderFacts(pid, command, sorted(set(mine)), len(mine), owner)
            outcome.holders_by_device.setdefault(address, []).append(facts)
    outcome.processes_scanned = fd_scan.processes_scanned
    outcome.processes_denied = len(fd_scan.denied)
    outcome.message = _message(fd_scan.processes_scanned, fd_scan.denied, unknown)
    if fd_scan.denied or unknown:
        outcome.state = ScanState.INCOMPLETE
    return outcome


def _vfio_paths(
    files: HostFiles, gpu: GpuFunction, log: WarningLog, outcome: VfioScanOutcome
) -> list[str] | None:
    """The VFIO files a process opens to use `gpu`; None when its IOMMU group cannot be read
    (then its holders are unknown)."""
    base = f"{PCI_DEVICES_DIR}/{gpu.address}"
    try:
        group = files.read_link(f"{base}/iommu_group").rstrip("/").rsplit("/", 1)[-1]
    except OSError as error:
        log.add_error(f"{base}/iommu_group", error)
        return None
    if not group.isascii() or not group.isdigit():
        log.add(f"{base}/iommu_group", f"not an IOMMU group: {group[:40]!r}")
        return None
    outcome.iommu_groups[gpu.address] = group
    # A process opens whichever of the two the kernel made: both are looked for.
    paths = [VFIO_GROUP_DIR + group, VFIO_GROUP_DIR + NO_IOMMU_PREFIX + group]
    try:
        cdevs = files.list_dir(f"{base}/vfio-dev")
    except FileNotFoundError:
        cdevs = []  # a kernel without VFIO device files (CONFIG_VFIO_DEVICE_CDEV)
    except OSError as error:
        log.add_error(f"{base}/vfio-dev", error)
        return None
    paths += [
        VFIO_DEVICE_DIR + name
        for name in sorted(cdevs)
        if name.removeprefix(NO_IOMMU_PREFIX).startswith("vfio")
    ]
    return paths


def _none_open(files: HostFiles, handed: Iterable[GpuFunction], log: WarningLog) -> bool:
    """Every passthrough driver's module holds no reference: no process has a VFIO device of
    it open. False when any is unknown (built in, unreadable)."""
    modules = {driver_module_name(files, gpu.driver) for gpu in handed if gpu.driver}
    return all(open_references(files, name, log) == 0 for name in sorted(modules))


def _message(scanned: int, denied: Iterable[int], unknown: list[str]) -> str:
    denied = sorted(denied)
    parts = []
    if unknown:
        parts.append(f"the IOMMU group of {', '.join(unknown)} cannot be read")
    if denied:
        parts.append(denied_words(denied, scanned))
    if parts:
        return "; ".join(parts) + ": VM holders are unknown"
    return f"swept /proc for VFIO files, examined every process ({scanned})"
