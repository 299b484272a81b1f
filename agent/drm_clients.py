"""Find the processes holding each GPU's DRM nodes open, from /proc/<pid>/fd and fdinfo.

Builds on `fdscan.find_fd_holders` (links under /dev/dri/), then reads fdinfo only for the
matching fds: `drm-pdev` names the PCI function (when the kernel prints it), otherwise the
node name from the link ("renderD128") is matched against each GPU's sysfs drm/ entries.
Clients are counted by (device, drm-client-id): dup'd fds and forked children share an id.
A permission error makes the scan INCOMPLETE (clients unknown), never "no clients".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.fdscan import OS_SYSCALLS, ProcSyscalls, find_fd_holders
from agent.hostfs import HostFiles
from agent.pci import GpuFunction
from agent.warninglog import WarningLog, describe_error

DRM_DEVICE_PREFIX = "/dev/dri/"
_DELETED_SUFFIX = " (deleted)"
_DENIED_PIDS_SHOWN = 10


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


def scan_drm_clients(
    files: HostFiles,
    gpus: Iterable[GpuFunction],
    log: WarningLog,
    *,
    syscalls: ProcSyscalls = OS_SYSCALLS,
) -> ClientScanOutcome:
    gpu_addresses = set()
    device_by_node = {}
    for gpu in gpus:
        gpu_addresses.add(gpu.address)
        for node in gpu.drm_nodes:
            device_by_node[node] = gpu.address
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
    denied = set(fd_scan.denied)
    clients: dict[tuple[str, int], DrmClientFacts] = {}
    for pid, held in sorted(fd_scan.holders.items()):
        per_device = _classify_fds(
            files,
            pid=pid,
            held=held,
            gpu_addresses=gpu_addresses,
            device_by_node=device_by_node,
            log=log,
            denied=denied,
        )
        if not per_device:
            continue
        command = _read_command(files, pid, log)
        if command is None:  # exited since its fds were read
            continue
        for address, (fd_count, client_ids) in per_device.items():
            clients[(address, pid)] = DrmClientFacts(pid, command, client_ids, fd_count)
    # A process whose fds were listed but whose fdinfo was refused counts as denied only.
    scanned = fd_scan.processes_scanned - len(denied.difference(fd_scan.denied))
    outcome = ClientScanOutcome(
        state=ScanState.INCOMPLETE if denied else ScanState.COMPLETE,
        processes_scanned=scanned,
        processes_denied=len(denied),
    )
    for (address, _), client in clients.items():
        outcome.clients_by_device.setdefault(address, []).append(client)
    if denied:
        shown = ", ".join(str(p) for p in sorted(denied)[:_DENIED_PIDS_SHOWN])
        more = (
            ""
            if len(denied) <= _DENIED_PIDS_SHOWN
            else f" and {len(denied) - _DENIED_PIDS_SHOWN} more"
        )
        outcome.message = (
            f"{len(denied)} of {scanned + len(denied)} processes could not be "
            f"examined (permission denied: pid {shown}{more}); the agent needs hostPID and "
            "CAP_SYS_PTRACE to see every client"
        )
    else:
        outcome.message = f"examined every process ({scanned})"
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


def _read_command(files: HostFiles, pid: int, log: WarningLog) -> str | None:
    """/proc/<pid>/comm; None when the process has exited, "" when unreadable."""
    path = f"proc/{pid}/comm"
    try:
        # A command name is any bytes the process chose: never fail on its encoding.
        return files.read_bytes(path).decode(errors="replace").rstrip("\n")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as error:
        log.add_error(path, error)
        return ""
