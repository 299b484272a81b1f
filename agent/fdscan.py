"""Find which processes hold given files open, by reading /proc/<pid>/fd links (like fuser).

`find_fd_holders` is the fast core: it walks /proc once with directory file descriptors
(`openat`/`readlinkat` relative to /proc and to each /proc/<pid>/fd, so the kernel never
re-walks the whole path), reads each fd's link target and keeps only the matches. No
per-fd objects are made for non-matching fds: a process's links are checked in one C-level
set or string operation before any Python loop runs over them.

Semantics a safety decision needs: a process that exits mid-scan (ENOENT/ESRCH) is simply
gone; a process whose fds cannot be read (EACCES, e.g. no hostPID/CAP_SYS_PTRACE) is listed
in `denied` (as is one whose fd directory fails in any other way), so the caller
reports "unknown", never "no holders". The system calls come in
through a `ProcSyscalls` parameter so tests can inject failures the test host cannot make.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from functools import partial

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_GONE = (FileNotFoundError, ProcessLookupError)


def _open_dir(path: str, dir_fd: int | None) -> int:
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


@dataclass(frozen=True, slots=True)
class ProcSyscalls:
    """The few system calls the scan makes; `OS_SYSCALLS` are the real ones."""

    # open_dir(path, dir_fd) -> fd of the directory; path relative to dir_fd unless None.
    open_dir: Callable[[str, int | None], int]
    # list_dir(dir fd) -> entry names.
    list_dir: Callable[[int], list[str]]
    # read_link(name, *, dir_fd) -> link target (os.readlink's signature).
    read_link: Callable[..., str]
    close: Callable[[int], None]


OS_SYSCALLS = ProcSyscalls(
    open_dir=_open_dir, list_dir=os.listdir, read_link=os.readlink, close=os.close
)


@dataclass(slots=True)
class FdScanResult:
    # pid -> [(fd number, link target)] for every fd whose target matched, in fd order.
    holders: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    # Processes whose fds were examined in full.
    processes_scanned: int = 0
    # Processes whose fds could not be read (permission): their holdings are unknown.
    denied: list[int] = field(default_factory=list)
    # Processes that exited while being scanned.
    vanished: int = 0


def find_fd_holders(
    proc_dir: str | os.PathLike[str],
    targets: Collection[str] = frozenset(),
    *,
    prefix: str | None = None,
    syscalls: ProcSyscalls = OS_SYSCALLS,
    pids: Iterable[int] | None = None,
) -> FdScanResult:
    """Which processes under `proc_dir` hold an fd whose link is in `targets` or starts
    with `prefix` (e.g. frozenset({"/dev/dri/renderD128"}), or prefix="/dev/dri/").
    With `pids`, only those processes are examined (one that does not exist counts as
    vanished) instead of every one /proc lists.

    Raises OSError only if `proc_dir` itself cannot be opened or listed.
    """
    wanted = targets if isinstance(targets, (set, frozenset)) else frozenset(targets)
    open_dir, list_dir, close = syscalls.open_dir, syscalls.list_dir, syscalls.close
    read_link = syscalls.read_link
    needle = "\0" + prefix if prefix else None
    result = FdScanResult()
    holders = result.holders
    proc_fd = open_dir(os.fspath(proc_dir), None)
    try:
        names = list_dir(proc_fd) if pids is None else [str(pid) for pid in pids]
        for name in names:
            if not name.isdigit():
                continue
            try:
                fd_dir = open_dir(name + "/fd", proc_fd)
            except _GONE:
                result.vanished += 1
                continue
            except OSError:  # EACCES, or anything else that hides the process's fds
                result.denied.append(int(name))
                continue
            try:
                fds = list_dir(fd_dir)
                try:
                    links = list(map(partial(read_link, dir_fd=fd_dir), fds))
                except OSError:
                    links = _read_links_one_by_one(read_link, fd_dir, fds)
            except _GONE:
                result.vanished += 1
                continue
            except OSError:
                result.denied.append(int(name))
                continue
            finally:
                close(fd_dir)
            result.processes_scanned += 1
            hit = (wanted and not wanted.isdisjoint(links)) or (
                needle is not None and needle in "\0" + "\0".join(links)
            )
            if hit:
                holders[int(name)] = _matches(fds, links, wanted, prefix)
    finally:
        close(proc_fd)
    return result


def _matches(
    fds: list[str], links: list[str], wanted: Collection[str], prefix: str | None
) -> list[tuple[int, str]]:
    """(fd, link) of one process's matching fds, in fd order (the rare, hit path)."""
    if prefix is None:
        found = [(int(fd), link) for fd, link in zip(fds, links, strict=True) if link in wanted]
    else:
        found = [
            (int(fd), link)
            for fd, link in zip(fds, links, strict=True)
            if link in wanted or link.startswith(prefix)
        ]
    found.sort()
    return found


def _read_links_one_by_one(read_link: Callable[..., str], fd_dir: int, fds: list[str]) -> list[str]:
    """Slow path when a bulk read failed: an fd closed since listing reads as "" (no match).

    PermissionError and a vanished process still propagate to the caller.
    """
    links = []
    for fd in fds:
        try:
            links.append(read_link(fd, dir_fd=fd_dir))
        except FileNotFoundError:
            links.append("")
    return links
