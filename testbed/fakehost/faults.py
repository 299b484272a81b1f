"""Readers of a fake host root that fail where a test denied an entry (`FakeHost.deny`), and
one that sees no debugfs.

Apart from the host's builders because they are the agent's own readers (agent.hostfs,
agent.fdscan) with faults put in, handed to the code under test: `DenyingHostFiles` and
`denying_proc_syscalls` raise PermissionError for the denied paths (tests run as root, so
chmod 000 is no obstacle), `HostFilesWithoutDebugfs` answers as a pod whose host mount does
not show debugfs.
"""

from __future__ import annotations

from pathlib import Path

from agent.fdscan import OS_SYSCALLS, ProcSyscalls
from agent.hostfs import HostFiles


def _canonical(path: str) -> str:
    """`path` with every directory symlink above its last component resolved, so a fault
    given by the real sysfs path also hits reads through sys/bus/pci/devices links."""
    head, _, name = path.rstrip("/").rpartition("/")
    return str(Path(head).resolve() / name)


class DenyingHostFiles(HostFiles):
    """HostFiles that refuse (PermissionError) the given paths and everything under them."""

    def __init__(self, host_root: Path, denied: frozenset[str]) -> None:
        super().__init__(host_root)
        self.denied = frozenset(_canonical(self.path(d)) for d in denied)

    def _check(self, relative: str) -> None:
        if not self.denied:
            return
        real = _canonical(self.path(relative))
        if any(real == d or real.startswith(d + "/") for d in self.denied):
            raise PermissionError(13, "Permission denied", self.path(relative))

    def read_bytes(self, relative: str) -> bytes:
        self._check(relative)
        return super().read_bytes(relative)

    def read_link(self, relative: str) -> str:
        self._check(relative)
        return super().read_link(relative)

    def list_dir(self, relative: str) -> list[str]:
        self._check(relative)
        return super().list_dir(relative)


class HostFilesWithoutDebugfs(HostFiles):
    """HostFiles of a node where debugfs is not mounted under the host root (as in a pod
    whose host mount does not show it): its paths are not found."""

    def _check(self, relative: str) -> None:
        if relative.startswith("sys/kernel/debug/"):
            raise FileNotFoundError(2, "No such file or directory", self.path(relative))

    def read_bytes(self, relative: str) -> bytes:
        self._check(relative)
        return super().read_bytes(relative)

    def list_dir(self, relative: str) -> list[str]:
        self._check(relative)
        return super().list_dir(relative)


def denying_proc_syscalls(proc_dir: str, denied: frozenset[str]) -> ProcSyscalls:
    """Real /proc system calls, except that opening a denied "proc/<pid>/fd" raises
    PermissionError, as it does for an agent without hostPID/CAP_SYS_PTRACE."""
    denied_fd_dirs = {d.removeprefix("proc/") for d in denied if d.startswith("proc/")}

    def open_dir(path: str, dir_fd: int | None) -> int:
        if dir_fd is not None and path in denied_fd_dirs:
            raise PermissionError(13, "Permission denied", f"{proc_dir}/{path}")
        return OS_SYSCALLS.open_dir(path, dir_fd)

    return ProcSyscalls(
        open_dir=open_dir,
        list_dir=OS_SYSCALLS.list_dir,
        read_link=OS_SYSCALLS.read_link,
        close=OS_SYSCALLS.close,
    )
