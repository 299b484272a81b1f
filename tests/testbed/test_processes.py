"""Control-plane processes die with the test run, and recorded ones stop only when they match."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed.harness import processes
from testbed.harness.waiting import wait_until

LAUNCHER = """
import sys, time
from pathlib import Path
from testbed.harness import processes
child = processes.start_in_own_group(
    ["sleep", "300"], Path(sys.argv[1]), die_with_parent=sys.argv[2] == "yes"
)
print(child.pid, flush=True)
time.sleep(300)
"""


def _launch(tmp_path: Path, die_with_parent: bool) -> tuple[subprocess.Popen[str], int]:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "log"), "yes" if die_with_parent else "no"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert launcher.stdout is not None
    return launcher, int(launcher.stdout.readline())


def test_child_dies_when_the_test_run_is_killed(tmp_path: Path) -> None:
    launcher, child = _launch(tmp_path, die_with_parent=True)
    # setpriv sets the parent-death signal, then execs the command in the same process.
    wait_until(
        "the child runs its command", lambda: processes.command_line(child) == ["sleep", "300"]
    )
    with launcher:
        launcher.send_signal(signal.SIGKILL)
    wait_until("the orphaned child is gone", lambda: processes.command_line(child) is None)


def test_recorded_process_stops_only_if_its_command_line_matches(tmp_path: Path) -> None:
    launcher, child = _launch(tmp_path, die_with_parent=False)
    with launcher:
        launcher.send_signal(signal.SIGKILL)
    time.sleep(0.2)
    processes.stop_recorded(child, ["sleep", "301"])
    assert processes.command_line(child) == ["sleep", "300"]
    processes.stop_recorded(child, ["sleep", "300"])
    assert processes.command_line(child) is None
