"""`hack/demo --fast` end to end, as a user runs it: the rollout completes, the busy node is
cordoned and waits for its inference pod (named), Blocked when the drain times out, then
updated once the pod is gone; every node's GPU daemon (a real DaemonSet) is paused
for its step and back, and nothing is left behind (no process, no folder);
Ctrl-C in the middle stops it as cleanly.

The demo starts its own control plane (about 30 s on a loaded 2-core machine) and runs in
about 1.5 min; the timeouts are generous, and each check waits for an exact line.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from testbed.demo.story import DRAIN_TIMEOUT
from testbed.harness.cluster import repository_root
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration

DEMO = repository_root() / "hack" / "demo"
RUN_SECONDS = 900
# Above the suite's 300 s per test: a demo that runs on fails at the tests' own timeouts, with
# its output, not at pytest-timeout's.
TEST_TIMEOUT_SECONDS = RUN_SECONDS + 120
FOLDER = re.compile(r"lives in (/\S+gpuctl-demo-\S+) ")


def processes_naming(folder: str) -> list[str]:
    """Command lines of live processes that mention `folder` (every process the demo starts
    does: data dirs, kubeconfigs, host roots)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if folder in text:
            found.append(f"{cmdline.parent.name}: {text}")
    return found


def folder_of(output: str) -> str:
    match = FOLDER.search(output)
    assert match, output
    return match.group(1)


def assert_nothing_left(output: str) -> None:
    folder = folder_of(output)
    assert not Path(folder).exists()
    wait_until(f"no process names {folder}", lambda: not processes_naming(folder) or None)


def index_of(lines: list[str], pattern: str, after: int = -1) -> int:
    """The first line after line `after` matching `pattern`."""
    for index, line in enumerate(lines):
        if index > after and re.search(pattern, line):
            return index
    raise AssertionError(f"no line matching {pattern!r} after line {after}:\n" + "\n".join(lines))


@pytest.mark.timeout(TEST_TIMEOUT_SECONDS)
def test_the_demo_rolls_past_a_busy_node_and_leaves_nothing_behind() -> None:
    demo = subprocess.Popen(
        [str(DEMO), "--fast"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = demo.communicate(timeout=RUN_SECONDS)
    finally:
        if demo.poll() is None:  # timed out: its process group (agents, coordinator) goes too
            os.killpg(demo.pid, signal.SIGKILL)
            demo.communicate()
    assert demo.returncode == 0, output
    lines = output.splitlines()
    held = index_of(lines, r"\| Rollout of gpu to v7\.1\.4\.6_260728\.7-\w+: Held, 1 of 4")
    # The watch ends there, saying what to do; the next one after the resume.
    told = index_of(lines, r"\| waiting for you: held after its first node", held)
    resumed = index_of(lines, r"rollout of gpu resumed", told)
    waits = index_of(
        lines, r"\|   gpu-node-2: Draining \(cordoned.* waiting for GPU pods ml/ollama;"
    )
    blocked = index_of(
        lines,
        rf"\|   gpu-node-2: Blocked \(still on the node after {DRAIN_TIMEOUT}: GPU pods ml/ollama",
        waits,
    )
    left_blocked = index_of(lines, r"\| waiting for you: every node left is Blocked", blocked)
    released = index_of(lines, r"ollama is gone from gpu-node-2", left_blocked)
    complete = index_of(
        lines, r"\| Rollout of gpu to \S+: Complete, 4 of 4 nodes updated", released
    )
    assert resumed < complete
    final_nodes = lines[index_of(lines, r"\$ gpuctl nodes", complete) :]
    for node in ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"):
        assert re.search(rf"{node} .* xeb_v7\.1\.4\.6_260728\.7 ", "\n".join(final_nodes))
    assert re.search(r"gpu-node-3 +2 \(\+8 VF\)", "\n".join(final_nodes))  # VFs restored
    assert "xpumanager was paused on every node for its step, and is back on each" in output
    assert "KMM never unloaded xe from a busy node" in output
    assert_nothing_left(output)


@pytest.mark.timeout(TEST_TIMEOUT_SECONDS)
def test_ctrl_c_stops_everything_it_started() -> None:
    demo = subprocess.Popen(
        [str(DEMO), "--fast"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    lines: list[str] = []
    assert demo.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(demo.stdout or ()), daemon=True)
    reader.start()
    try:
        # The coordinator and the agents run once the first `gpuctl nodes` is shown.
        wait_until("the demo shows gpuctl nodes", lambda: "    $ gpuctl nodes\n" in lines, 600)
        os.killpg(demo.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground job
        try:
            code: int | None = demo.wait(timeout=300)
        except subprocess.TimeoutExpired:
            code = None  # still running: killed below, and the assertion shows its output
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        reader.join(timeout=30)
        demo.stdout.close()
    output = "".join(lines)
    assert code == 130, output
    assert "interrupted: everything was stopped and removed" in output
    assert_nothing_left(output)
