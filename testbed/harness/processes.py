"""Start and stop the control-plane processes, each in its own process group.

Every child runs in a new session (so a Ctrl-C of the test run does not reach it first and the
whole group can be signalled at once) with its output in a log file. Children of a test run
also get Linux's parent-death signal, so they die even when pytest itself is killed; those of
``hack/cluster up`` must outlive it and do not. The signal is set by util-linux's ``setpriv``
exec'ing the command, never by Python code run in the forked child (``preexec_fn``): the test
process runs gRPC's threads, and a child forked from it that runs Python before its exec can
die there (seen in CI: gRPC's epoll poller failing in the child, which never ran KMM's webhook
server). Stopping sends SIGTERM to the group, waits,
then SIGKILLs what is left. A pid recorded by ``hack/cluster up`` is only signalled while it
still runs the recorded command line, so ``down`` never kills a reused pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

STOP_GRACE_SECONDS = 10.0
POLL_SECONDS = 0.05
# Runs the command with SIGKILL as its parent-death signal (sent when the thread that started
# it exits).
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--")


def start_in_own_group(
    argv: list[str],
    log_file: Path,
    *,
    die_with_parent: bool,
    environ: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Starts ``argv`` in a new session, stdout and stderr appended to ``log_file``; its
    environment is ``environ`` (default: this process's)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            [*DIE_WITH_PARENT, *argv] if die_with_parent else argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if environ is None else dict(environ),
        )


def command_line(pid: int) -> list[str] | None:
    """The argv of a live process, or None when it is gone (or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not raw:
        return None
    return raw.rstrip(b"\0").decode(errors="replace").split("\0")


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _stop_group(pgid: int, gone: Callable[[float], bool]) -> None:
    """SIGTERM the group; SIGKILL it if ``gone(grace)`` says the leader outlived the grace."""
    _signal_group(pgid, signal.SIGTERM)
    if not gone(STOP_GRACE_SECONDS):
        _signal_group(pgid, signal.SIGKILL)
        gone(STOP_GRACE_SECONDS)


def stop_child(process: subprocess.Popen[bytes]) -> None:
    """Stops a child started by ``start_in_own_group`` and reaps it."""

    def gone(seconds: float) -> bool:
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    _stop_group(process.pid, gone)


def kill_child(process: subprocess.Popen[bytes]) -> None:
    """SIGKILLs a child started by ``start_in_own_group`` (its whole group) and reaps it:
    nothing is flushed or released, as when a node loses power or the OOM killer strikes."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def stop_recorded(pid: int, argv: list[str]) -> None:
    """Stops the group of a process recorded earlier, if that pid still runs ``argv``."""
    if command_line(pid) != argv:
        return

    def gone(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while command_line(pid) == argv:
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_SECONDS)
        return True

    _stop_group(pid, gone)
