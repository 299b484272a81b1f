"""What the agent reads about one process that holds a device: its command and its owner;
and the words for processes it could not examine.

Shared by the DRM client scan (drm_clients.py) and the VFIO holder scan (vfio_holders.py):
both name a holder by /proc/<pid>/comm and by the pod its cgroup puts it in.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.cgroup_owner import OwnerKind, ProcessOwner, owner_of
from agent.hostfs import HostFiles
from agent.warninglog import WarningLog


def read_owner(files: HostFiles, pid: int) -> ProcessOwner:
    """Whose process `pid` is, from /proc/<pid>/cgroup; unknown (never a host process) when
    that cannot be read."""
    try:
        text = files.read_bytes(f"proc/{pid}/cgroup").decode(errors="replace")
    except OSError as error:
        why = error.strerror or type(error).__name__
        return ProcessOwner(OwnerKind.UNKNOWN, why=f"/proc/{pid}/cgroup: {why}")
    return owner_of(text)


def read_command(files: HostFiles, pid: int, log: WarningLog) -> str | None:
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


DENIED_PIDS_SHOWN = 10


def denied_words(denied: Iterable[int], scanned: int) -> str:
    """ "2 of 3001 processes could not be examined (permission denied: pid 7, 9)", at most
    DENIED_PIDS_SHOWN pids named."""
    pids = sorted(denied)
    shown = ", ".join(str(pid) for pid in pids[:DENIED_PIDS_SHOWN])
    more = "" if len(pids) <= DENIED_PIDS_SHOWN else f" and {len(pids) - DENIED_PIDS_SHOWN} more"
    return (
        f"{len(pids)} of {scanned + len(pids)} processes could not be examined "
        f"(permission denied: pid {shown}{more})"
    )
