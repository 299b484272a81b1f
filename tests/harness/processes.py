"""Start and stop the control-plane processes, each in its own process group.

Every child runs in a new session (so a Ctrl-C of the test run does not reach it first and so
the whole group can be signalled at once) with its output in a log file. ``stop_group`` sends
SIGTERM to the group, waits, then SIGKILLs whatever is left. A pid recorded by ``hack/cluster
up`` is only signalled while it still runs the recorded command line, so a reused pid is never
killed by ``down``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

STOP_GRACE_SECONDS = 10.0


def start_in_own_group(argv: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    """Starts ``argv`` in a new session, stdout and stderr appended to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group ``pgid``, then SIGKILL it if it outlives ``grace_seconds``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap(pgid)
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _reap(pgid)


def _reap(pid: int) -> None:
    """Collects our own exited child so it does not linger as a zombie (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_recorded(pid: int, argv: list[str]) -> None:
    """Stops the group of a process recorded earlier, if that pid still runs ``argv``."""
    if command_line(pid) == argv:
        stop_group(pid)
