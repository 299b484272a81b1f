"""docs/getting-started.md runs to its end on the demo's system: every command the page shows,
in its order, read from the page itself (testbed/demo/quick_start.py), runs for real or is in
REPLACED with why; the output the page shows is what the commands print; and each `gpuctl
rollout status --watch` ends by itself where the page says (exit 4 on a `waiting for you:`
line, else 0), well before its timeout.

The cluster is the demo's (testbed/demo/system.py: a control plane with KMM's CRDs and the
chart's, kwok as every node's kubelet, KMM's own operator) with the page's three GPU nodes,
gpu-2 busy (testbed/demo/quick_start_bed.py). The commands run as typed, in bash, with the
system's admin kubeconfig, in a folder that shows this checkout, on a PATH of only `gpuctl`
(this .venv's), `kubectl` ($KUBEBUILDER_ASSETS') and `helm` ($GPUCTL_HELM): a command of any
other program fails unless REPLACED lists it. `helm install` and `helm test` are real; the
processes behind the chart's Pods are the test bed's, started in `after` where the chart's
would start (the bed's docstring says how). A `# each node` command runs for each GPU node, a
`# until: TEXT` one again until it prints TEXT.

Between commands the test bed does what a person would (`before`): frees gpu-2 as its remedy
says before the page's retry, and lets the coordinator catch up with a resume or a retry
before the next watch (one started on the status from before would end at once, on the hold or
Blocked node just lifted). And it keeps the page's pace: from a command that starts a rollout
(apply, delete) gpu-1's agent is stopped until a watch has shown gpu-1's check (the bed's
`freeze`), or the watch would open on a rollout already held, or over.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from testbed.demo.narrator import Narrator
from testbed.demo.quick_start import Command, File, read_steps, unmatched
from testbed.demo.quick_start_bed import BUSY, FIRST, NODES, WAIT_SECONDS, QuickStartBed
from testbed.demo.system import System, running_system
from testbed.harness.cluster import repository_root
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration

PAGE = repository_root() / "docs" / "getting-started.md"
# The commands the test bed replaces, by their first words, and why.
REPLACED = {
    "hack/setup": "the test runs in the .venv hack/setup made; its gpuctl is the one run",
    "docker build": "no Docker engine: the test bed runs the coordinator and the agents as "
    "processes of this checkout",
    "docker push": "no registry: as for docker build",
    "kubectl create namespace": "the demo's system made gpuctl-system: KMM runs there",
}
BASH = shutil.which("bash") or "/bin/bash"
WATCH = "gpuctl rollout status --watch"
NEEDS_YOU = "waiting for you:"
EXIT_NEEDS_YOU = 4
COMMAND_SECONDS = 180.0
WATCH_SECONDS = 300.0
# The whole test takes 30 to 50 s here (the system starts in about 6 s); generous for a loaded
# 2-core machine.
TEST_TIMEOUT_SECONDS = 900


@dataclass
class Ran:
    code: int
    lines: list[str]


def expected_code(command: Command) -> int:
    """4 for a watch whose shown output ends waiting for you, 0 for any other command."""
    waits = bool(command.shown) and command.shown[-1].startswith(NEEDS_YOU)
    return EXIT_NEEDS_YOU if command.text.startswith(WATCH) and waits else 0


def replaced(words: str) -> str | None:
    return next((k for k in REPLACED if words == k or words.startswith(f"{k} ")), None)


class QuickStart:
    """The page's commands, in order, on a running system with the test bed around them."""

    def __init__(self, system: System, folder: Path, driver: File) -> None:
        self.bed = QuickStartBed(system, yaml.safe_load(driver.text))
        self.work = folder / "checkout"
        self.work.mkdir()
        for entry in repository_root().iterdir():  # the page runs from the checkout
            if entry.name != driver.name:
                (self.work / entry.name).symlink_to(entry)
        tools = folder / "bin"
        tools.mkdir()
        (tools / "gpuctl").symlink_to(Path(sys.executable).parent / "gpuctl")
        (tools / "kubectl").symlink_to(Path(os.environ["KUBEBUILDER_ASSETS"]) / "kubectl")
        (tools / "helm").symlink_to(os.environ["GPUCTL_HELM"])
        home = folder / "home"
        self.env = {
            "PATH": str(tools),
            "HOME": str(home),
            "KUBECONFIG": str(system.kubeconfig),
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
            **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")},
        }
        self.transcript: list[str] = []
        # What the coordinator shows once it has seen the last command (the next watch waits).
        self.caught_up: tuple[str, Callable[[], bool]] | None = None
        self.test_pod: Future[subprocess.CompletedProcess[str]] | None = None
        self._kubelet = ThreadPoolExecutor(max_workers=1)

    def close(self) -> None:
        self.bed.thaw()
        self._kubelet.shutdown(wait=False, cancel_futures=True)

    def follow(self, command: Command) -> None:
        words = " ".join(command.text.split())
        stand_in = replaced(words)
        if stand_in is not None:
            self.transcript.append(f"# replaced: {command.text}  ({REPLACED[stand_in]})")
            return
        texts = [command.text]
        if command.comment.startswith("each node"):  # "# each node with an Intel GPU"
            assert FIRST in command.text, command.text
            texts = [command.text.replace(FIRST, node) for node in NODES]
        for text in texts:
            self.before(words)
            if "until:" in command.comment:
                ran = self.run_until(text, command.comment.split("until:", 1)[1].strip())
            else:
                ran = self.run(text)
            assert ran.code == expected_code(command), f"`{text}` exited {ran.code}\n{self.log()}"
            if command.shown:
                why = unmatched(command.shown, ran.lines)
                assert why is None, f"`{text}` printed other than the page: {why}\n{self.log()}"
            self.after(" ".join(text.split()), ran)

    def run_until(self, text: str, wanted: str) -> Ran:
        def printed() -> Ran | None:
            ran = self.run(text)
            return ran if any(wanted in line for line in ran.lines) else None

        return wait_until(f"`{text}` prints {wanted!r}", printed, WAIT_SECONDS, 1.0)

    def run(self, text: str) -> Ran:
        """`text` in bash, as typed; what it printed (stdout and stderr, as on a terminal),
        each line heard as it comes. Killed after its timeout, it fails with its output."""
        seconds = WATCH_SECONDS if text.startswith(WATCH) else COMMAND_SECONDS
        started = time.monotonic()
        process = subprocess.Popen(
            [BASH, "--noprofile", "--norc", "-c", text],
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=self._read, args=(process, lines), daemon=True)
        reader.start()
        try:
            code = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            reader.join(timeout=10)
            self.transcript.append(f"$ {text}    [killed after {seconds:g}s]\n" + "\n".join(lines))
            raise AssertionError(f"`{text}` ran on after {seconds:g}s\n{self.log()}") from None
        reader.join(timeout=10)
        took = time.monotonic() - started
        self.transcript.append(f"$ {text}    [exit {code}, {took:.1f}s]\n" + "\n".join(lines))
        return Ran(code, lines)

    def _read(self, process: subprocess.Popen[str], lines: list[str]) -> None:
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                lines.append(line.rstrip("\n"))
                if lines[-1].startswith(f"  {FIRST}: Checking"):
                    self.bed.thaw()  # the watch has shown the rollout's opening

    def log(self) -> str:
        return "\n".join(self.transcript) + "\ncoordinator log:\n" + self.bed.rig.coordinator_log()

    def before(self, words: str) -> None:
        bed = self.bed
        if words.startswith("helm install "):
            bed.adopt_agent_account()
        elif words.startswith("helm test "):
            self.test_pod = self._kubelet.submit(bed.run_test_pod, self.env)
        elif words.startswith(("kubectl apply ", "kubectl delete gpudrivers ")):
            bed.freeze(FIRST)
        elif words.startswith("gpuctl rollout retry "):
            bed.free_busy_node()
        elif words.startswith(WATCH) and self.caught_up is not None:
            wait_until(*self.caught_up, WAIT_SECONDS)
            self.caught_up = None

    def after(self, words: str, ran: Ran) -> None:
        bed = self.bed
        if words.startswith(WATCH):
            bed.thaw()  # whatever it printed
        elif words.startswith("helm install "):
            bed.start_coordinator()
        elif words.startswith("kubectl label node "):
            bed.start_agent(words.split()[3])
        elif words.endswith("rollout status daemonset/gpuctl-agent"):
            wait_until("the chart's agent on every GPU node", bed.agents_everywhere, WAIT_SECONDS)
        elif words == "gpuctl nodes":
            listed = {line.split()[0] for line in ran.lines if line.strip()}
            assert listed >= set(NODES), f"`gpuctl nodes` lacks a node\n{self.log()}"
        elif words.startswith("helm test ") and self.test_pod is not None:
            pod = self.test_pod.result(timeout=WAIT_SECONDS)
            self.transcript.append(f"# helm test's Pod ran, exit {pod.returncode}:\n{pod.stdout}")
            assert pod.returncode == 0, f"{pod.stderr}\n{self.log()}"
        elif words == f"gpuctl node inspect {BUSY}":
            assert any("pid 4242 (ollama)" in line for line in ran.lines), self.log()
        elif words.startswith("gpuctl rollout resume"):
            self.caught_up = ("the coordinator has the hold released", bed.hold_released)
        elif words.startswith("gpuctl rollout retry "):
            self.caught_up = (f"the coordinator has {BUSY} taken up", bed.busy_node_taken_up)


@pytest.mark.timeout(TEST_TIMEOUT_SECONDS)
def test_the_quick_start_runs_to_its_end_on_the_demos_system(tmp_path: Path) -> None:
    steps = read_steps(PAGE.read_text())
    [driver] = [step for step in steps if isinstance(step, File)]
    with running_system(os.environ, Narrator(sys.stdout)) as system:
        page = QuickStart(system, tmp_path, driver)
        page.bed.add_nodes()
        try:
            for step in steps:
                if isinstance(step, File):
                    (page.work / step.name).write_text(step.text + "\n")
                else:
                    page.follow(step)
        finally:
            page.close()
        print("\n".join(page.transcript))
        # Deleting the GPUDriver unloaded every node through its checks.
        assert page.bed.unloaded_everywhere(), page.log()
