"""find_fd_holders: which processes hold which files open, on fake and on the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.fdscan import OS_SYSCALLS, ProcSyscalls, find_fd_holders
from testbed.fakehost import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path)
    host.add_process(10, "a", fds={3: "/dev/dri/renderD128", 4: "/data/model.bin"})
    host.add_process(11, "b", fds={3: "socket:[1]", 7: "/dev/dri/card0", 8: "/dev/dri/card0"})
    host.add_process(12, "c", fds={3: "pipe:[9]"})
    return host


def test_targets_name_exact_paths(host: FakeHost) -> None:
    result = find_fd_holders(host.path("proc"), frozenset({"/dev/dri/card0", "/data/model.bin"}))
    assert result.holders == {
        10: [(4, "/data/model.bin")],
        11: [(7, "/dev/dri/card0"), (8, "/dev/dri/card0")],
    }
    assert result.processes_scanned == 4  # with the fake host's init, pid 1
    assert (result.denied, result.vanished) == ([], 0)


def test_prefix_matches_a_directory(host: FakeHost) -> None:
    result = find_fd_holders(host.path("proc"), prefix="/dev/dri/")
    assert sorted(result.holders) == [10, 11]
    assert result.holders[10] == [(3, "/dev/dri/renderD128")]


def test_only_the_given_pids_are_examined(host: FakeHost) -> None:
    result = find_fd_holders(host.path("proc"), prefix="/dev/dri/", pids=[11, 12, 99])
    assert sorted(result.holders) == [11]
    assert result.processes_scanned == 2
    assert (result.denied, result.vanished) == ([], 1)  # 99 does not exist


def test_no_match_is_an_empty_result(host: FakeHost) -> None:
    result = find_fd_holders(host.path("proc"), ["/nowhere"])
    assert result.holders == {}
    assert result.processes_scanned == 4


def test_denied_and_vanished_processes_are_reported_apart(host: FakeHost) -> None:
    def open_dir(path: str, dir_fd: int | None) -> int:
        if path == "11/fd":
            raise PermissionError(13, "Permission denied")
        if path == "12/fd":
            raise ProcessLookupError(3, "No such process")
        return OS_SYSCALLS.open_dir(path, dir_fd)

    syscalls = ProcSyscalls(open_dir, os.listdir, os.readlink, os.close)
    result = find_fd_holders(host.path("proc"), prefix="/dev/dri/", syscalls=syscalls)
    assert sorted(result.holders) == [10]
    assert result.denied == [11]
    assert result.vanished == 1
    assert result.processes_scanned == 2


def test_denied_readlink_denies_the_process(host: FakeHost) -> None:
    def read_link(name: str, *, dir_fd: int) -> str:
        raise PermissionError(13, "Permission denied", name)

    syscalls = ProcSyscalls(OS_SYSCALLS.open_dir, os.listdir, read_link, os.close)
    result = find_fd_holders(host.path("proc"), prefix="/dev/dri/", syscalls=syscalls)
    assert (result.holders, sorted(result.denied)) == ({}, [1, 10, 11, 12])


def test_every_opened_directory_is_closed(host: FakeHost) -> None:
    opened: list[int] = []
    closed: list[int] = []

    def open_dir(path: str, dir_fd: int | None) -> int:
        fd = OS_SYSCALLS.open_dir(path, dir_fd)
        opened.append(fd)
        return fd

    def close(fd: int) -> None:
        closed.append(fd)
        os.close(fd)

    find_fd_holders(
        host.path("proc"),
        prefix="/dev/",
        syscalls=ProcSyscalls(open_dir, os.listdir, os.readlink, close),
    )
    assert len(opened) == 5  # /proc and four fd directories
    assert sorted(opened) == sorted(closed)


@pytest.fixture
def child_holding(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real child process holding a file open twice (an fd and its dup)."""
    held = tmp_path / "held.bin"
    held.write_bytes(b"x")
    code = (
        "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); os.dup(fd); "
        "print('ready', flush=True); time.sleep(60)"
    )
    with subprocess.Popen([sys.executable, "-c", code, str(held)], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n"
            yield child.pid, held
        finally:
            child.kill()


def test_real_proc_finds_a_child_and_its_dup(child_holding: tuple[int, Path]) -> None:
    pid, held = child_holding
    result = find_fd_holders("/proc", frozenset({str(held)}))
    assert list(result.holders) == [pid]
    assert len(result.holders[pid]) == 2
    assert {target for _, target in result.holders[pid]} == {str(held)}
    assert result.processes_scanned >= 2


def test_real_proc_finds_this_process(tmp_path: Path) -> None:
    held = tmp_path / "mine"
    with held.open("w") as f:
        result = find_fd_holders("/proc", [str(held)])
        assert result.holders == {os.getpid(): [(f.fileno(), str(held))]}
