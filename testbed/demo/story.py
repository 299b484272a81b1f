"""The demo's story: four GPU nodes at one xe version, a rollout to the next, one node busy.

Nodes (fake host roots with real sysfs/proc layouts, testbed/fakehost):
- gpu-node-1 and gpu-node-4: one Arc B580 each, idle;
- gpu-node-2: one Arc B580 whose render node an inference pod (`ml/ollama`, asking for a
  gpu.intel.com/xe) holds open;
- gpu-node-3: two Pro B70, whose 4 SR-IOV VFs each (on `xe`, idle) are enabled once KMM has
  loaded the PF driver; the GPUDriver lets the rollout disable idle VFs for the unload and
  re-enable them after (`disableIdleVFs`);
- every node: `xpumanager`, a real DaemonSet selecting on gpuctl.dev/driver-ready=true, whose
  pod holds the render node open (testbed/rollout_live/gpu_daemons.py runs its process on the
  node's host root); the GPUDriver declares it in `rollout.pause`, so each node's step pauses
  it and the node is Done only once it is back.
Nodes 1, 2 and 4 run the real `gpuctl-agent run`. Node 3 runs the rollout rig's protocol
agent (the same inspection over the same gRPC stream): a fake root cannot make VFs vanish when
`sriov_numvfs` is written, so that agent applies the kernel's effect itself.

The GPUDriver moves from OLD to NEW; `gpuctl rollout status --watch` runs beside it, and
ends where the rollout waits for a person (exit 4, saying what to do). The rollout holds after
its first node (the default) until `gpuctl rollout resume`; node 2 is Blocked naming the pod
while the others are updated (the GPUDriver does not evict GPU pods), where the second watch
ends; then the inference job ends (the demo deletes the pod) and node 2 is updated too, which
a third watch follows to Complete. KMM's
worker takes `load_seconds` per node so the steps can be seen. Every wait is for an exact
state (phase about the new version), with generous timeouts, so a loaded machine is slow, not
wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from coordinator.kube.client import path
from gpuctl.cli.rollout_view import EXIT_NEEDS_YOU
from gpuctl.common import names
from testbed.cluster_agents import get_gpunode
from testbed.demo.narrator import Narrator
from testbed.demo.system import NAMESPACE, System
from testbed.fakehost.scenarios import B70_PFS
from testbed.harness.waiting import wait_until
from testbed.kwok_nodes import give_gpus
from testbed.rollout_live.fake_nodes import VF_COUNT, enable_vfs, vf_node_root_before_vfs
from testbed.rollout_live.gpu_daemons import (
    DaemonRuntime,
    Started,
    daemon_set,
    gpu_workload_pod,
)
from testbed.rollout_live.images import NEW, OLD, image_of
from testbed.rollout_live.scenario import module_version, old_root, wait_status

BIN = Path(sys.executable).parent
STEP_TIMEOUT = "60s"
# The busy node's drain waits this long for its inference pod, then it is Blocked: short enough
# to watch, long enough for an idle node's drain (its GPU daemon paused) on a loaded machine.
DRAIN_TIMEOUT = "30s"
DAEMON = "xpumanager"
WORKLOAD_NAMESPACE = "ml"
WORKLOAD = "ollama"
ROLLOUT = {
    "holdAfterFirstNode": True,  # the default: the admin checks the first node, then resumes
    "disableIdleVFs": True,
    "pause": {"daemonSets": [f"{NAMESPACE}/{DAEMON}"]},
    "timeouts": {
        **dict.fromkeys(("check", "prepare", "load", "verify"), STEP_TIMEOUT),
        "drain": DRAIN_TIMEOUT,
    },
}
WAIT_SECONDS = 300.0
WATCH_SECONDS = 600


def gpuctl(system: System, *args: str) -> str:
    """`gpuctl ARGS` as a user runs it (the admin kubeconfig); its output."""
    done = subprocess.run(
        [str(BIN / "gpuctl"), *args],
        env={**os.environ, "KUBECONFIG": str(system.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout + done.stderr


def show(system: System, narrator: Narrator, *args: str) -> None:
    narrator.typed(" ".join(("gpuctl", *args)))
    narrator.note(gpuctl(system, *args))


class Watch:
    """`gpuctl rollout status --watch` in the background, its lines narrated as they come."""

    def __init__(self, system: System, narrator: Narrator) -> None:
        self._process = subprocess.Popen(
            [str(BIN / "gpuctl"), "rollout", "status", "--watch", f"--timeout={WATCH_SECONDS}"],
            env={**os.environ, "KUBECONFIG": str(system.kubeconfig)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the demo, which stops it in order
        )
        self._narrator = narrator
        self.lines: list[str] = []
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        self._thread = threading.Thread(target=self._relay, args=(stdout,), daemon=True)
        self._thread.start()

    def _relay(self, stdout: IO[str]) -> None:
        for line in stdout:
            self.lines.append(line.rstrip("\n"))
            self._narrator.stream_line(line.rstrip("\n"))

    def shows(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def ended(self) -> bool:
        return self._process.poll() is not None

    def wait(self) -> int:
        code = self._process.wait(timeout=WATCH_SECONDS + 60)
        self._thread.join(timeout=10)
        return code

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=20)
        self._thread.join(timeout=10)


def tell(
    system: System, narrator: Narrator, *, busy_seconds: float, pause: float, load_seconds: float
) -> None:
    nodes = _install(system, narrator, load_seconds=load_seconds, pause=pause)
    _, busy, vfs, _ = nodes
    runtime = DaemonRuntime(system.rig.kube, None, system.rig.hosts).start()
    try:
        before = _daemons(system, narrator, runtime, nodes)
        _workload(system, narrator, runtime, busy, pause=pause)
        _upgrade(system, narrator, nodes, busy_seconds=busy_seconds, pause=pause)
        _check_updated(system, nodes)
        _daemons_back(narrator, runtime, nodes, before)
    finally:
        runtime.stop()
    rig = system.rig
    wait_until(
        f"{vfs}'s agent reports its VFs enabled again",
        lambda: '"numVfs": 4' in json.dumps(get_gpunode(rig.kube, vfs)),
        WAIT_SECONDS,
    )
    # The GPUNode mirrors the agents' reports, which may trail the rollout's own fresh reads by a
    # rescan: `gpuctl nodes` is shown once every node's mirrored report has the new module.
    wait_until(
        f"every GPUNode reports xe {NEW}",
        lambda: all(f"xeb_{NEW}" in json.dumps(get_gpunode(rig.kube, n)) for n in nodes),
        WAIT_SECONDS,
    )
    narrator.step(f"the rollout completed: every node runs xe {NEW}")
    show(system, narrator, "nodes")
    narrator.note(
        "KMM never unloaded xe from a busy node (every node's modprobe records each unload)"
    )


def _install(system: System, narrator: Narrator, *, load_seconds: float, pause: float) -> list[str]:
    """Four GPU nodes, their agents and the coordinator; the GPUDriver Done at OLD."""
    rig = system.rig
    for node in ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"):
        rig.kmm.delay_node(node, load_seconds)
    narrator.step("four GPU nodes, each with a fake host root (real sysfs/proc layouts)")
    idle_1 = rig.add_node("gpu-node-1", old_root)
    busy = rig.add_node("gpu-node-2", old_root)
    vfs = rig.add_node("gpu-node-3", lambda root: vf_node_root_before_vfs(root, OLD))
    idle_4 = rig.add_node("gpu-node-4", old_root)
    narrator.note(f"{idle_1}, {idle_4}: an Arc B580 each, xe {OLD}")
    narrator.note(f"{busy}: an Arc B580, xe {OLD} (soon busy)")
    narrator.note(f"{vfs}: two Pro B70 with 4 SR-IOV VFs each on xe, xe {OLD}")

    narrator.step(f"GPUDriver {names.GPUDRIVER_PLURAL}/gpu at {OLD}, and the coordinator")
    rig.create_driver(OLD, ROLLOUT)
    rig.start_coordinator()
    narrator.note("gpuctl-coordinator runs as its ServiceAccount, gRPC with TLS for the agents")

    narrator.step("one agent per node: gpuctl-agent run, reading its node's host root")
    for node in (idle_1, busy, idle_4):
        rig.start_agent(node, "--allow-node-changes")
    rig.start_protocol_agent(vfs)
    narrator.note("--allow-node-changes: the GPUDriver lets the rollout disable idle VFs")
    narrator.note(f"{vfs}: the rig's protocol agent, which can disable VFs on a fake root")
    nodes = [idle_1, busy, vfs, idle_4]
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=WAIT_SECONDS)
    rig.wait_kmm_loaded(nodes, timeout=WAIT_SECONDS)
    narrator.note("KMM's worker loaded xe on each node (its NodeModulesConfigs say so)")
    for pf in B70_PFS:
        enable_vfs(rig.hosts[vfs], pf, VF_COUNT)
    narrator.note(f"{vfs}: SR-IOV enabled once its PF driver is up, 4 VFs per B70")
    wait_until(
        "every node's GPUNode",
        lambda: all(get_gpunode(rig.kube, node) for node in nodes),
        WAIT_SECONDS,
    )
    show(system, narrator, "nodes")
    time.sleep(pause)
    return nodes


def _daemons(
    system: System, narrator: Narrator, runtime: DaemonRuntime, nodes: list[str]
) -> dict[str, Started]:
    """XPU Manager on every node, holding its render node: what a real GPU node runs."""
    rig = system.rig
    narrator.step(f"DaemonSet {DAEMON} on every node where gpuctl.dev/driver-ready=true")
    for node in nodes:
        give_gpus(rig.kube, node, 1)
    daemon_set(rig.kube, NAMESPACE, DAEMON, node_selector={names.DRIVER_READY_LABEL: "true"})
    running = wait_until(
        f"{DAEMON} holding every node's render node",
        lambda: runtime.running() if set(runtime.running()) >= set(nodes) else None,
        WAIT_SECONDS,
    )
    narrator.note("its pod holds /dev/dri/renderD128 open on each node; the GPUDriver declares")
    narrator.note("it in rollout.pause: each node's step pauses it, and waits for it back")
    return running


def _daemons_back(
    narrator: Narrator, runtime: DaemonRuntime, nodes: list[str], before: dict[str, Started]
) -> None:
    after = {s.node: s for s in runtime.running().values() if s.pod.startswith(DAEMON)}
    for node in nodes:
        stopped = ("stopped", before[node]) in runtime.history
        if not stopped or node not in after or after[node].uid == before[node].uid:
            raise RuntimeError(f"{DAEMON} on {node} was not paused and back: {runtime.history}")
    narrator.note(f"{DAEMON} was paused on every node for its step, and is back on each")


def _workload(
    system: System, narrator: Narrator, runtime: DaemonRuntime, busy: str, *, pause: float
) -> None:
    """An inference pod on `busy` holding its render node: a workload the rollout waits for."""
    rig = system.rig
    narrator.step(f"an inference pod {WORKLOAD_NAMESPACE}/{WORKLOAD} on {busy}, holding its GPU")
    rig.kube.request("POST", path("", "v1", "namespaces"), body={"metadata": {"name": "ml"}})
    gpu_workload_pod(rig.kube, WORKLOAD_NAMESPACE, WORKLOAD, node=busy)
    started = wait_until(
        f"{WORKLOAD} running on {busy}",
        lambda: next((s for s in runtime.running().values() if s.pod == WORKLOAD), None),
        WAIT_SECONDS,
    )
    narrator.note(f"it asks for a gpu.intel.com/xe; its process {WORKLOAD} (pid {started.pid})")
    narrator.note("holds /dev/dri/renderD128 open. The GPUDriver does not evict GPU pods.")
    wait_until(
        f"{busy}'s agent reports pid {started.pid}",
        lambda: f'"pid": {started.pid}' in json.dumps(get_gpunode(rig.kube, busy)),
        WAIT_SECONDS,
    )
    show(system, narrator, "node", "inspect", busy)
    time.sleep(pause)


def _upgrade(
    system: System, narrator: Narrator, nodes: list[str], *, busy_seconds: float, pause: float
) -> None:
    """OLD -> NEW: the first node, the hold, resume; the busy node Blocked until its inference
    pod goes."""
    rig = system.rig
    idle_1, busy, vfs, idle_4 = nodes
    narrator.step(f"upgrade: the GPUDriver's kernelModule.version {OLD} -> {NEW}, and its image")
    narrator.note(f"(kubectl patch gpudriver gpu: version {NEW}, containerImage {image_of(NEW)})")
    rig.set_version(NEW)
    target = rig.target()
    wait_status(rig, f"targets {target}", lambda s: s.get("targetVersion") == target)
    narrator.typed("gpuctl rollout status --watch    # in the background, as it goes")
    watch = Watch(system, narrator)
    try:
        rig.wait_phases({idle_1: "Done"}, timeout=WAIT_SECONDS)
        # The watch ends where the rollout waits for a person, saying what to do (exit 4).
        _watch_ends(watch, EXIT_NEEDS_YOU, "waiting for you: held after its first node")
        narrator.step(f"{idle_1} runs {NEW}; the rollout holds after its first node")
        narrator.note(f"what the coordinator would do next, by its own decision ({busy} is busy)")
        show(system, narrator, "rollout", "plan")
        time.sleep(pause)
        show(system, narrator, "rollout", "resume")
        # The next watch is about the resumed rollout, not the hold it ended at.
        wait_status(rig, "resumed", lambda s: s.get("holdKind") != "AfterFirstNode")
        narrator.typed("gpuctl rollout status --watch")
        watch = Watch(system, narrator)
        _watch_ends(watch, EXIT_NEEDS_YOU, "waiting for you: every node left is Blocked")
        wanted = {**dict.fromkeys([vfs, idle_4], "Done"), busy: "Blocked"}
        rig.wait_phases(wanted, timeout=WAIT_SECONDS)
        narrator.step(f"{busy} is Blocked and left alone; the idle nodes went on")
        narrator.note(f"its reason: {rig.annotation(busy, names.REASON)}")
        show(system, narrator, "nodes")
        narrator.step(f"in {busy_seconds:g}s the inference job ends (the demo deletes its pod)")
        time.sleep(busy_seconds)
        narrator.typed(f"kubectl delete pod -n {WORKLOAD_NAMESPACE} {WORKLOAD}")
        rig.kube.request(
            "DELETE", path("", "v1", "pods", namespace=WORKLOAD_NAMESPACE, name=WORKLOAD)
        )
        narrator.note(f"{WORKLOAD} is gone from {busy}; the coordinator rechecks it")
        # The next watch is about the node taken up again, not the Blocked one it ended at.
        wait_until(
            f"{busy} taken up again",
            lambda: rig.state(busy) != f"Blocked {target}",
            WAIT_SECONDS,
        )
        narrator.typed("gpuctl rollout status --watch")
        watch = Watch(system, narrator)
        _watch_ends(watch, 0, "Complete, 4 of 4 nodes updated")
    finally:
        watch.stop()


def _watch_ends(watch: Watch, code: int, words: str) -> None:
    """Waits for `gpuctl rollout status --watch` to end by itself with `code`, having said
    `words`."""
    ended = watch.wait()
    if ended != code or not watch.shows(words):
        raise RuntimeError(
            f"gpuctl rollout status --watch exited {ended}, not {code} after {words!r}"
        )


def _check_updated(system: System, nodes: list[str]) -> None:
    wrong = {n: module_version(system.rig, n) for n in nodes}
    wrong = {n: v for n, v in wrong.items() if v != NEW}
    if wrong:
        raise RuntimeError(f"nodes not at {NEW} after the rollout: {wrong}")
