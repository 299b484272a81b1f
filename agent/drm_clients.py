"""Find the processes holding each GPU's DRM nodes open: from the kernel's client lists
(debugfs) when they can be read, else by sweeping every /proc/<pid>/fd.

The kernel's lists first (`drm_debugfs.read_device_clients`): one line per open DRM file of a
device, naming its process. Only those processes (and their forked children, which share
the files: /proc/<pid>/task/<tid>/children) are then examined like the sweep examines every
process: /proc/<pid>/fd links under /dev/dri/, fdinfo of the matching fds, comm. On a node
with thousands of processes that is a few dozen instead of all of them.

The sweep (`fdscan.find_fd_holders` over all of /proc) is the fallback: when debugfs is not
mounted under the host root, a list cannot be read or does not parse, or a GPU bound to a
DRM driver has no DRM node to find its list by. It also runs when the kernel lists a client
the examined processes do not account for (an fd passed to an unrelated process, an mmap
kept after close, a process in another pid namespace): it may find the holder. The two
sources are merged, never chosen between: a client either one shows counts. A kernel-listed
client no process is found holding is still a client (fd count 0, the pid the kernel names,
0 when not visible): the kernel's list is the truth about open files; /proc only names who
holds them. Either way fdinfo's `drm-pdev` names the PCI function when the kernel prints it,
otherwise the node name from the link ("renderD128") is matched against each GPU's sysfs
drm/ entries. Clients are counted by (device, drm-client-id): dup'd fds and forked children
share an id. A permission error makes the scan INCOMPLETE (clients unknown), never "no
clients".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agent.cgroup_owner import ProcessOwner
from agent.drm_debugfs import (
    DEBUGFS_DRI_DIR,
    DebugfsFormatError,
    KernelClient,
    clients_path,
    minor_number,
    read_device_clients,
)
from agent.fdscan import OS_SYSCALLS, FdScanResult, ProcSyscalls, find_fd_holders
from agent.hostfs import HostFiles
from agent.pci import GpuFunction
from agent.process_facts import denied_words, read_command, read_owner
from agent.warninglog import WarningLog, describe_error
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS

DRM_DEVICE_PREFIX = "/dev/dri/"
_DELETED_SUFFIX = " (deleted)"


class ScanState(enum.Enum):
    COMPLETE = "COMPLETE"
    SKIPPED_UNUSED = "SKIPPED_UNUSED"
    INCOMPLETE = "INCOMPLETE"
    FAILED = "FAILED"


@dataclass(slots=True)
class DrmClientFacts:
    pid: int
    command: str
    client_ids: set[int] = field(default_factory=set)
    fd_count: int = 0
    # Whose process it is (None: not looked at, unknown).
    owner: ProcessOwner | None = None


@dataclass(slots=True)
class ClientScanOutcome:
    state: ScanState
    # PCI address -> clients of that function, in pid order.
    clients_by_device: dict[str, list[DrmClientFacts]] = field(default_factory=dict)
    processes_scanned: int = 0
    processes_denied: int = 0
    message: str = ""


def parse_fdinfo(text: str) -> dict[str, str]:
    """The "key:\\tvalue" lines of a /proc/<pid>/fdinfo/<fd> file."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def client_count(clients: Sequence[DrmClientFacts]) -> int:
    """Distinct DRM clients of one device: by client id; a process without ids counts once."""
    ids = {client_id for client in clients for client_id in client.client_ids}
    return len(ids) + sum(1 for client in clients if not client.client_ids)


@dataclass(slots=True)
class _GpuIndex:
    addresses: set[str]
    device_by_node: dict[str, str]


@dataclass(slots=True)
class _Found:
    """What examining some processes found."""

    clients: dict[tuple[str, int], DrmClientFacts] = field(default_factory=dict)
    denied: set[int] = field(default_factory=set)
    scanned: int = 0
    # Processes holding a DRM fd of one of the GPUs.
    holders: set[int] = field(default_factory=set)

    def clients_of(self, address: str) -> list[DrmClientFacts]:
        return [c for (a, _), c in self.clients.items() if a == address]


def scan_drm_clients(
    files: HostFiles,
    gpus: Iterable[GpuFunction],
    log: WarningLog,
    *,
    syscalls: ProcSyscalls = OS_SYSCALLS,
) -> ClientScanOutcome:
    gpus = list(gpus)
    index = _GpuIndex(addresses=set(), device_by_node={})
    for gpu in gpus:
        index.addresses.add(gpu.address)
        for node in gpu.drm_nodes:
            index.device_by_node[node] = gpu.address
    lists = _read_kernel_lists(files, gpus, log)
    if isinstance(lists, str):
        swept = _sweep(files, index, log, syscalls)
        if isinstance(swept, ClientScanOutcome):
            return swept
        return _outcome(swept, f"{lists}: swept /proc, examined every process ({swept.scanned})")
    return _from_kernel_lists(files, index, lists, log, syscalls)


def _read_kernel_lists(
    files: HostFiles, gpus: Sequence[GpuFunction], log: WarningLog
) -> dict[str, list[KernelClient]] | str:
    """PCI address -> the kernel's clients of that GPU, for every GPU that can have DRM
    clients; or why the lists cannot be used."""
    lists: dict[str, list[KernelClient]] = {}
    for gpu in gpus:
        if not gpu.drm_nodes:
            if gpu.driver == "" or gpu.driver in VM_PASSTHROUGH_DRIVERS:
                continue  # no DRM node: no process can hold one open
            driver = gpu.driver or "an unknown driver"
            return f"{gpu.address} is bound to {driver} but has no DRM node"
        path = clients_path(min(minor_number(node) for node in gpu.drm_nodes))
        try:
            lists[gpu.address] = read_device_clients(files, gpu.drm_nodes)
        except FileNotFoundError:
            return f"no DRM client list in debugfs ({DEBUGFS_DRI_DIR} not mounted?)"
        except (OSError, UnicodeDecodeError) as error:
            log.add_error(path, error)
            return f"cannot read {path} ({describe_error(error)})"
        except DebugfsFormatError as error:
            log.add(path, f"not the kernel's client list format: {error}")
            return f"cannot parse {path}"
    return lists


def _from_kernel_lists(
    files: HostFiles,
    index: _GpuIndex,
    lists: dict[str, list[KernelClient]],
    log: WarningLog,
    syscalls: ProcSyscalls,
) -> ClientScanOutcome:
    listed = sum(len(clients) for clients in lists.values())
    pending = sorted(
        {_thread_group(files, c.tgid) for clients in lists.values() for c in clients if c.tgid > 0}
    )
    found = _Found()
    examined: set[int] = set()
    while pending:
        try:
            fd_scan = find_fd_holders(
                files.path("proc"), prefix=DRM_DEVICE_PREFIX, syscalls=syscalls, pids=pending
            )
        except OSError:
            break  # /proc itself: the sweep below says so
        examined.update(pending)
        _attribute(files, fd_scan, index, log, found)
        pending = sorted(
            {child for pid in fd_scan.holders for child in _children(files, pid)} - examined
        )
    unaccounted = _unaccounted(lists, found)
    if not unaccounted:
        return _outcome(
            found,
            f"the kernel lists {listed} DRM client{'' if listed == 1 else 's'}; "
            f"examined the {found.scanned} processes holding them",
        )
    swept = _sweep(files, index, log, syscalls)
    if isinstance(swept, ClientScanOutcome):
        return swept
    found = swept
    for address, clients in _unaccounted(lists, found).items():
        for client in clients:
            _add_unattributed(found, address, client)
    return _outcome(
        found,
        "the kernel lists DRM clients that no process it names holds: swept /proc, "
        f"examined every process ({found.scanned})",
    )


def _unaccounted(
    lists: dict[str, list[KernelClient]], found: _Found
) -> dict[str, list[KernelClient]]:
    """The kernel's clients of each device that the processes examined do not account for:
    by client id when the kernel prints it, else by count."""
    missing = {}
    for address, kernel in lists.items():
        held = found.clients_of(address)
        if all(k.client_id is not None for k in kernel):
            ids = {i for c in held for i in c.client_ids}
            left = [k for k in kernel if k.client_id not in ids]
        else:
            holders = {c.pid for c in held}
            short = len(kernel) - client_count(held)
            left = [k for k in kernel if k.tgid not in holders][: max(short, 0)]
        if left:
            missing[address] = left
    return missing


def _add_unattributed(found: _Found, address: str, client: KernelClient) -> None:
    """A client the kernel lists but no process was found holding: still a client."""
    entry = found.clients.setdefault(
        (address, client.tgid), DrmClientFacts(client.tgid, client.command)
    )
    if client.client_id is not None:
        entry.client_ids.add(client.client_id)


def _thread_group(files: HostFiles, pid: int) -> int:
    """The process (thread group) of `pid`: kernels before the `tgid` column list the
    opening thread's id, and /proc/<tid>/ exists (unlisted) for every thread. `pid` itself
    when /proc/<pid>/status cannot say."""
    try:
        status = files.read_text(f"proc/{pid}/status")
    except (OSError, UnicodeDecodeError):
        return pid
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "Tgid":
            value = value.strip()
            return int(value) if value.isascii() and value.isdigit() else pid
    return pid


def _children(files: HostFiles, pid: int) -> list[int]:
    """The children of every thread of `pid` (/proc/<pid>/task/<tid>/children); [] when
    unreadable (gone, or a kernel without CONFIG_PROC_CHILDREN)."""
    children = []
    try:
        for tid in files.list_dir(f"proc/{pid}/task"):
            text = files.read_text(f"proc/{pid}/task/{tid}/children")
            children += [int(word) for word in text.split() if word.isascii() and word.isdigit()]
    except (OSError, UnicodeDecodeError):
        pass
    return children


def _sweep(
    files: HostFiles, index: _GpuIndex, log: WarningLog, syscalls: ProcSyscalls
) -> _Found | ClientScanOutcome:
    """Every process under /proc examined; a FAILED outcome when /proc cannot be read."""
    try:
        fd_scan = find_fd_holders(files.path("proc"), prefix=DRM_DEVICE_PREFIX, syscalls=syscalls)
    except OSError as error:
        log.add_error("proc", error)
        return ClientScanOutcome(
            state=ScanState.FAILED,
            message=f"cannot read /proc ({describe_error(error)}): clients are unknown",
        )
    if not (fd_scan.processes_scanned or fd_scan.denied or fd_scan.vanished):
        # Every Linux system has pid 1: an empty proc/ is an unmounted one, not an idle node.
        log.add("proc", "no process directories: is the host's /proc mounted there?")
        return ClientScanOutcome(
            state=ScanState.FAILED,
            message="no processes under /proc (not mounted?): clients are unknown",
        )
    found = _Found()
    _attribute(files, fd_scan, index, log, found)
    return found


def _attribute(
    files: HostFiles, fd_scan: FdScanResult, index: _GpuIndex, log: WarningLog, found: _Found
) -> None:
    """Add what one fd scan found (its processes' DRM fds, fdinfo and comm) to `found`."""
    denied = set(fd_scan.denied)
    for pid, held in sorted(fd_scan.holders.items()):
        per_device = _classify_fds(
            files,
            pid=pid,
            held=held,
            gpu_addresses=index.addresses,
            device_by_node=index.device_by_node,
            log=log,
            denied=denied,
        )
        if not per_device:
            continue
        command = read_command(files, pid, log)
        if command is None:  # exited since its fds were read
            continue
        found.holders.add(pid)
        owner = read_owner(files, pid)
        for address, (fd_count, client_ids) in per_device.items():
            facts = DrmClientFacts(pid, command, client_ids, fd_count, owner)
            found.clients[(address, pid)] = facts
    # A process whose fds were listed but whose fdinfo was refused counts as denied only.
    found.scanned += fd_scan.processes_scanned - len(denied.difference(fd_scan.denied))
    found.denied |= denied


def _outcome(found: _Found, how: str) -> ClientScanOutcome:
    """The outcome of what was found; `how` says how, when nothing was denied."""
    denied = found.denied
    scanned = found.scanned
    outcome = ClientScanOutcome(
        state=ScanState.INCOMPLETE if denied else ScanState.COMPLETE,
        processes_scanned=scanned,
        processes_denied=len(denied),
    )
    for (address, _), client in sorted(found.clients.items()):
        outcome.clients_by_device.setdefault(address, []).append(client)
    if denied:
        outcome.message = (
            f"{denied_words(denied, scanned)}; the agent needs hostPID and CAP_SYS_PTRACE to "
            "see every client"
        )
    else:
        outcome.message = how
    return outcome


def _classify_fds(
    files: HostFiles,
    *,
    pid: int,
    held: list[tuple[int, str]],
    gpu_addresses: set[str],
    device_by_node: dict[str, str],
    log: WarningLog,
    denied: set[int],
) -> dict[str, tuple[int, set[int]]]:
    """device address -> (fd count, client ids) for one process's /dev/dri fds."""
    per_device: dict[str, tuple[int, set[int]]] = {}
    for fd, target in held:
        node = target.removesuffix(_DELETED_SUFFIX).rsplit("/", 1)[-1]
        fdinfo_path = f"proc/{pid}/fdinfo/{fd}"
        try:
            fdinfo = parse_fdinfo(files.read_text(fdinfo_path))
        except (FileNotFoundError, ProcessLookupError):
            continue  # fd closed or process exited since the link was read
        except (OSError, UnicodeDecodeError) as error:
            log.add_error(fdinfo_path, error)
            denied.add(pid)
            fdinfo = {}
        address = fdinfo.get("drm-pdev") or device_by_node.get(node, "")
        if address not in gpu_addresses:
            continue  # another vendor's GPU, or a node of no Intel display function
        count, client_ids = per_device.get(address, (0, set()))
        client_id = fdinfo.get("drm-client-id")
        if client_id is not None:
            try:
                client_ids.add(int(client_id))
            except ValueError:
                log.add(fdinfo_path, f"drm-client-id is not a number: {client_id!r}")
        per_device[address] = (count + 1, client_ids)
    return per_device
