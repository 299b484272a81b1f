"""The real-world events of a world run, each done the way it happens on a real fleet.

Every event acts on the world as a kernel, a kubelet, an admin or a daemon would, never on
gpuctl's or KMM's objects in their stead: a reboot is testbed/rollout_live/reboots.py's (a new
boot id, modules and processes gone, the in-tree `xe` autoloaded or blacklisted, then the
kubelet Ready and the agent started again; into a new kernel, whose images the fleet's
pipeline pushed before or pushes later); a host daemon opening the GPU is a process with a
DRM fd on the render node; the admin's cordon, taint, skip label, a label taken off (the node
leaves the GPUDriver's selector) and `kubectl delete node` are the API calls kubectl makes; a
version change and pause/resume/undo are the GPUDriver writes and `gpuctl rollout
pause|resume|undo`; the node's GPU DaemonSets are created and deleted as `kubectl` does, and
their pods made, bound and run as a cluster does (testbed/world/daemons.py); the admin's
drain is `kubectl drain` itself. Each returns what it did, in words, for the run's log.

`World` is what the events change and what the invariants need to know of it: which nodes are
busy, cordoned (or drained), tainted, skipped or taken out of the selector by the admin, which
the GPUDriver wants, which GPU DaemonSets exist, and the rollout's target. An event with nothing
to do returns a NoOp.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.kube.client import MERGE_PATCH, path
from gpuctl.common import names
from testbed.chaos.replicas import Replicas
from testbed.harness.waiting import retried
from testbed.rollout_live.images import OLD, kernel_mappings, pushed_image
from testbed.rollout_live.reboots import kubelet_ready, reboot, register_again
from testbed.rollout_live.rig import BIN, RolloutRig
from testbed.rollout_live.scenario import busy_with_ollama, idle_again
from testbed.world.daemons import (
    AGENT_LABEL,
    PAUSED,
    UNDECLARED,
    WorldDaemons,
    kube_folder,
    report_capacity,
    selectors,
)

# The longest a rebooting node's kubelet takes to post Ready (drawn from the event's choice).
KUBELET_BACK_SECONDS = 3.0
# The slowest KMM gets on a node (an image pull), drawn from the event's choice.
KMM_SLOW_SECONDS = 6.0
# The longest KMM's manager and webhook stay down when restarted, drawn from the choice.
KMM_DOWN_SECONDS = 3.0
# The admin's taint, which the world's GPUDriver does not tolerate.
MAINTENANCE_TAINT = {"key": "gpuctl.test/maintenance", "value": "true", "effect": "NoSchedule"}
# The label every world node has and the world's GPUDriver selects besides the rig's own: the
# admin takes it off a node (it leaves the selector) and puts it back.
SELECTED_LABEL = "gpuctl.test/gpu"
SELECTED_VALUE = "arc-b580"
# A new kernel a node reboots into: the distro's next ABI, 6.8.0-<61 + n>-generic.
NEXT_KERNEL_ABI = 61
# How often the pipeline has pushed the driver's images for a node's new kernel before the
# node boots it (else it pushes them later: events.image_pushed).
PUSHED_BEFORE = 0.6
# The values of xe's max_vfs a parameters change goes through (a real xe parameter).
MAX_VFS = (7, 3, 1)
# How long the admin's `kubectl drain` waits for the node's pods to go before it gives up.
DRAIN_TIMEOUT = "60s"


class NoOp(str):
    """What an event found that left it nothing to do (no workload to end, nothing cordoned):
    said in the log, not counted as injected."""

    __slots__ = ()


def version_of_round(number: int) -> str:
    return f"v7.2.{number}.6_260728.7"


@dataclass
class World:
    rig: RolloutRig
    replicas: Replicas
    nodes: list[str]
    busy: set[str] = field(default_factory=set)
    # Every holder's open: (node, time.time() just before it), for the kernel's races.
    opens: list[tuple[str, float]] = field(default_factory=list)
    cordoned: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    tainted: set[str] = field(default_factory=set)
    unselected: set[str] = field(default_factory=set)
    # The GPUDriver tolerates the admin's maintenance taint (events.tolerations_change).
    tolerating: bool = False
    slow: set[str] = field(default_factory=set)
    # Every driver version the GPUDriver has had (the pipeline builds each for a new kernel),
    # and the new kernels booted whose images are not pushed yet.
    versions: set[str] = field(default_factory=lambda: {OLD})
    unpushed: set[str] = field(default_factory=set)
    kernels: int = 0
    paused: bool = False
    round: int = 0
    parameter_changes: int = 0
    target: str = ""
    version: str = OLD
    # The world's GPU DaemonSets (None: a world without them), and which of them exist.
    daemons: WorldDaemons | None = None
    daemon_sets: set[str] = field(default_factory=set)
    # Nodes the admin drained (in `cordoned` too: admin_uncordon ends the drain).
    drained: set[str] = field(default_factory=set)

    def wanted(self, node: str) -> bool:
        """The GPUDriver wants the node: one of the fleet's, not tainted by the admin and in
        its selector."""
        tainted = node in self.tainted and not self.tolerating
        return node in self.nodes and not tainted and node not in self.unselected

    def follow_the_gpudriver(self) -> None:
        """The version and target as the GPUDriver has them now (after a write of gpuctl's)."""
        self.version = str(self.rig.driver()["spec"]["kernelModule"].get("version") or "")
        self.target = self.rig.target()

    def next_version(self) -> str:
        """The GPUDriver moves to the next version (published for every node's kernel)."""
        self.round += 1
        version = version_of_round(self.round)
        self.rig.publish_everywhere(version)
        self.versions.add(version)
        retried(lambda: self.rig.set_version(version))
        self.version, self.target = version, self.rig.kmm_version_at(version)
        return version


def _reboot(
    w: World, node: str, choice: float, *, autoload: bool, busy: bool, kernel: str | None = None
) -> str:
    boot = reboot(w.rig, node, in_tree_autoloads=autoload, kernel=kernel)
    w.busy.discard(node)  # every process went with the old boot
    back = choice * KUBELET_BACK_SECONDS
    time.sleep(back)
    kubelet_ready(w.rig, node, boot)
    if busy:
        opened(w, node)  # a host daemon opens the in-tree driver at once
    if w.daemons is not None:
        # The kubelet starts the node's pods again (after ollama's open: one writer of xe's
        # reference count at a time, _count_refs).
        w.daemons.runtime.rebooted(node)
    how = "blacklisted" if not autoload else ("autoloaded, opened" if busy else "autoloaded")
    into = f" into {kernel}" if kernel else ""
    return f"{node} rebooted{into} (in-tree xe {how}), Ready after {back:.1f} s"


def reboot_busy(w: World, node: str, choice: float) -> str:
    return _reboot(w, node, choice, autoload=True, busy=True)


def reboot_idle(w: World, node: str, choice: float) -> str:
    return _reboot(w, node, choice, autoload=True, busy=False)


def reboot_blacklisted(w: World, node: str, choice: float) -> str:
    return _reboot(w, node, choice, autoload=False, busy=False)


def reboot_new_kernel(w: World, node: str, choice: float) -> str:
    """The node reboots into a kernel the distro installed (unattended-upgrades, then a
    reboot): its in-tree xe autoloads (opened by a host daemon on some), and the driver's
    images for that kernel are pushed already, or not yet (image_pushed pushes them)."""
    w.kernels += 1
    kernel = f"6.8.0-{NEXT_KERNEL_ABI + w.kernels}-generic"
    pushed = choice < PUSHED_BEFORE
    if pushed:
        _push(w, kernel)
    else:
        w.unpushed.add(kernel)
    busy = choice < PUSHED_BEFORE / 2 or choice >= (1 + PUSHED_BEFORE) / 2
    said = _reboot(w, node, choice, autoload=True, busy=busy, kernel=kernel)
    return f"{said}; its images {'pushed before' if pushed else 'not pushed yet'}"


def _push(w: World, kernel: str) -> None:
    for version in sorted(w.versions):
        w.rig.publish(version, kernel)


def image_pushed(w: World, _node: str, _choice: float) -> str:
    """The fleet's image pipeline pushes the driver's images (every version the GPUDriver has
    had) for the new kernels nodes booted before they were built."""
    if not w.unpushed:
        return NoOp("every kernel booted has its images")
    kernels = sorted(w.unpushed)
    for kernel in kernels:
        _push(w, kernel)
    w.unpushed.clear()
    return f"the images for {', '.join(kernels)} pushed"


def _refcnt(w: World, node: str) -> int:
    text = w.rig.hosts[node].real("sys/module/xe/refcnt")
    return int(text.read_text().strip() or "0") if text.exists() else 0


def _count_refs(w: World, node: str, held: int) -> None:
    """xe's reference count as the kernel keeps it: one per open DRM file, the GPU
    DaemonSets' pods' too (busy_with_ollama and idle_again write ollama's alone: an idle
    ollama beside a DaemonSet's pod would read as no reference, and the agent rightly skips
    the client scan of a module nothing references)."""
    if w.rig.hosts[node].real("sys/module/xe").exists():
        w.rig.hosts[node].write("sys/module/xe/refcnt", f"{max(0, held)}\n")


def opened(w: World, node: str) -> None:
    """A host daemon (ollama) opens the node's GPU."""
    w.opens.append((node, time.time()))
    held = _refcnt(w, node)
    busy_with_ollama(w.rig, node)
    _count_refs(w, node, held + 1)
    w.busy.add(node)


def workload_start(w: World, node: str, _choice: float) -> str:
    if node in w.busy:
        return NoOp(f"{node} is busy already")
    if not w.rig.hosts[node].real("sys/module/xe").exists():
        return NoOp(f"{node} has no xe loaded to open")
    opened(w, node)
    return f"ollama opens {node}'s GPU"


def workload_end(w: World, node: str, _choice: float) -> str:
    busy = sorted(w.busy)
    if not busy:
        return NoOp("no workload to end")
    # The node drawn, or the busy one its index falls on: ends are as frequent as starts.
    chosen = node if node in w.busy else busy[w.nodes.index(node) % len(busy)]
    held = _refcnt(w, chosen)
    idle_again(w.rig, chosen)
    _count_refs(w, chosen, held - 1)
    w.busy.discard(chosen)
    return f"ollama lets {chosen}'s GPU go"


def admin_cordon(w: World, node: str, _choice: float) -> str:
    retried(lambda: w.rig.cordon(node))
    w.cordoned.add(node)
    return f"the admin cordons {node}"


def _drawn_or_first(node: str, among: set[str]) -> str:
    """The node drawn if it is among those an end can undo, else the first of them ("": none)."""
    return node if node in among else next(iter(sorted(among)), "")


def _undone(node: str, among: set[str], undo: Callable[[str], object]) -> str:
    """What an earlier event did, undone on the node drawn if it is among those it did it to,
    else on the first of them: that node's name ("": none to undo)."""
    chosen = _drawn_or_first(node, among)
    if chosen:
        retried(lambda: undo(chosen))
        among.discard(chosen)
    return chosen


def admin_uncordon(w: World, node: str, _choice: float) -> str:
    chosen = _undone(node, w.cordoned, lambda n: w.rig.cordon(n, cordoned=False))
    w.drained.discard(chosen)
    return f"the admin uncordons {chosen}" if chosen else NoOp("nothing the admin cordoned")


def admin_drain(w: World, node: str, _choice: float) -> str:
    """`kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --force`: kubectl
    cordons the node, then evicts every pod on it but the DaemonSets' through the Eviction API
    (KMM's worker and image pull pods, gpuctl's image probes, mid-work or not) and waits for
    them to go; `admin-uncordon` ends it. The agents' pods stand in for a DaemonSet's, and are
    left by their label as --ignore-daemonsets leaves those (testbed/world/daemons.py)."""
    w.cordoned.add(node)  # before the cordon: the admin's, from kubectl's first write on
    w.drained.add(node)
    done = subprocess.run(
        [
            str(kube_folder() / "kubectl"),
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            f"--pod-selector={AGENT_LABEL[0]}!={AGENT_LABEL[1]}",
            f"--timeout={DRAIN_TIMEOUT}",
            "--kubeconfig",
            str(w.rig.cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    evicted = sorted(set(re.findall(r"pod/(\S+) evicted", done.stdout + done.stderr)))
    said = f"the admin drains {node}: {len(evicted)} pods evicted {evicted}"
    if done.returncode != 0:
        return f"{said}; kubectl drain failed ({done.returncode}): {done.stderr.strip()[-300:]}"
    return said


def _daemons(w: World) -> WorldDaemons:
    assert w.daemons is not None, "a world without its GPU DaemonSets (testbed/world/daemons.py)"
    return w.daemons


def _daemon_set_comes_or_goes(w: World, name: str, what: str) -> str:
    """`kubectl apply` of DaemonSet `name` when it is not there, `kubectl delete` when it is."""
    daemons = _daemons(w)
    if name in w.daemon_sets:
        retried(lambda: daemons.delete(name))
        w.daemon_sets.discard(name)
        return f"the admin deletes {what} DaemonSet {name}"
    w.daemon_sets.add(name)  # before the write: its pods may open the GPU at once after it
    selector = selectors({SELECTED_LABEL: SELECTED_VALUE})[name]
    retried(lambda: daemons.create(name, selector))
    return f"the admin creates {what} DaemonSet {name} (selecting {selector})"


def daemons_paused(w: World, _node: str, _choice: float) -> str:
    """XPU Manager's DaemonSet, declared in the GPUDriver's rollout.pause and selecting
    gpuctl.dev/driver-ready, is installed, or uninstalled (mid-step or not)."""
    return _daemon_set_comes_or_goes(w, PAUSED, "the declared")


def daemons_undeclared(w: World, _node: str, _choice: float) -> str:
    """A GPU exporter's DaemonSet that no rollout.pause declares, on every GPU node, is
    installed or uninstalled: its pods hold the GPU, so the nodes it runs on are Blocked."""
    return _daemon_set_comes_or_goes(w, UNDECLARED, "an undeclared")


def skip(w: World, node: str, _choice: float) -> str:
    retried(lambda: w.rig.label_node(node, {names.OPT_OUT_LABEL: names.OPT_OUT_VALUE}))
    w.skipped.add(node)
    return f"the admin labels {node} {names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}"


def unskip(w: World, node: str, _choice: float) -> str:
    chosen = _undone(node, w.skipped, lambda n: w.rig.label_node(n, {names.OPT_OUT_LABEL: None}))
    return (
        f"the admin takes {names.OPT_OUT_LABEL} off {chosen}" if chosen else NoOp("no node skipped")
    )


def taint(w: World, node: str, _choice: float) -> str:
    """The admin taints the node (`kubectl taint node NODE gpuctl.test/maintenance=true:
    NoSchedule`); the world's GPUDriver tolerates only what it names (`tolerateAllTaints:
    false`), so KMM would drop the node: gpuctl takes its driver off through the checks."""
    if node in w.tainted:
        return NoOp(f"{node} is tainted already")
    taints = [MAINTENANCE_TAINT]
    retried(lambda: _patch_spec(w, node, {"taints": taints}))
    w.tainted.add(node)
    return f"the admin taints {node} {MAINTENANCE_TAINT['key']}:NoSchedule"


def untaint(w: World, node: str, _choice: float) -> str:
    chosen = _undone(node, w.tainted, lambda n: _patch_spec(w, n, {"taints": None}))
    return f"the admin takes the taint off {chosen}" if chosen else NoOp("no node tainted")


def _patch_spec(w: World, node: str, spec: dict[str, object]) -> None:
    body = {"spec": spec}
    w.rig.kube.request(
        "PATCH", path("", "v1", "nodes", name=node), body=body, content_type=MERGE_PATCH
    )


def relabel_out(w: World, node: str, _choice: float) -> str:
    """The admin takes the GPUDriver's label off the node (`kubectl label node NODE
    gpuctl.test/gpu-`): it leaves the selector, and its driver comes off through the checks."""
    if node in w.unselected:
        return NoOp(f"{node} is out of the selector already")
    w.unselected.add(node)  # before the write: the driver may come off at once after it
    retried(lambda: w.rig.label_node(node, {SELECTED_LABEL: None}))
    return f"the admin takes {SELECTED_LABEL} off {node}"


def relabel_in(w: World, node: str, _choice: float) -> str:
    chosen = _undone(
        node, w.unselected, lambda n: w.rig.label_node(n, {SELECTED_LABEL: SELECTED_VALUE})
    )
    return f"the admin labels {chosen} {SELECTED_LABEL} again" if chosen else NoOp("none out")


def reregister(w: World, node: str, _choice: float) -> str:
    # The boot the kubelet posted last: the host did not reboot.
    boot = str(w.rig.node(node)["status"]["nodeInfo"]["bootID"])
    register_again(w.rig, node, boot, {SELECTED_LABEL: SELECTED_VALUE})
    if w.daemons is not None:
        retried(lambda: report_capacity(w.rig.kube, node))
    w.cordoned.discard(node)
    w.drained.discard(node)  # a new object: no cordon, no taint, no label of the admin's
    w.skipped.discard(node)
    w.tainted.discard(node)
    w.unselected.discard(node)  # the kubelet's --node-labels have the GPUDriver's label
    return f"{node} deleted and registered again by its kubelet"


def version_change(w: World, _node: str, _choice: float) -> str:
    return f"the GPUDriver moves to {w.next_version()}"


def _gpuctl_rollout(w: World, verb: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gpuctl"), "rollout", verb, "--kubeconfig", str(w.rig.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def pause_resume(w: World, _node: str, _choice: float) -> str:
    verb = "resume" if w.paused else "pause"
    done = _gpuctl_rollout(w, verb)
    if done.returncode != 0:
        return f"gpuctl rollout {verb} failed ({done.returncode}): {done.stderr.strip()}"
    w.paused = not w.paused
    return f"gpuctl rollout {verb}"


def undo(w: World, _node: str, _choice: float) -> str:
    """The admin takes the GPUDriver back to its previous revision mid-rollout (`gpuctl
    rollout undo`): every node goes there through the checks."""
    before = w.version
    done = _gpuctl_rollout(w, "undo")
    if done.returncode != 0:
        return f"gpuctl rollout undo failed ({done.returncode}): {done.stderr.strip()}"
    w.follow_the_gpudriver()
    return f"gpuctl rollout undo: {before} -> {w.version}"


def kmm_slow(w: World, node: str, choice: float) -> str:
    seconds = 0.0 if node in w.slow else choice * KMM_SLOW_SECONDS
    w.rig.kmm.delay_node(node, seconds)
    (w.slow.add if seconds else w.slow.discard)(node)
    return f"KMM's containers on {node} start after {seconds:.1f} s"


def parameters_change(w: World, _node: str, _choice: float) -> str:
    """The admin changes the module's parameters mid-rollout: a new KMM version for the same
    driver version, a reload on every node through the checks."""
    w.parameter_changes += 1
    parameters = [f"max_vfs={MAX_VFS[w.parameter_changes % len(MAX_VFS)]}"]
    retried(lambda: w.rig.patch_driver({"spec": {"kernelModule": {"parameters": parameters}}}))
    w.target = w.rig.target()
    return f"the GPUDriver's parameters become {parameters}"


def tolerations_change(w: World, _node: str, _choice: float) -> str:
    """The admin adds a toleration of the maintenance taint to the GPUDriver (its tainted
    nodes are wanted again) or takes it away (they leave through the checks)."""
    tolerating = not w.tolerating
    toleration = {k: v for k, v in MAINTENANCE_TAINT.items() if k != "value"}
    tolerations = [{**toleration, "operator": "Exists"}] if tolerating else None
    if not tolerating:
        w.tolerating = False  # before the write: the tainted nodes' drivers may come off at once
    retried(lambda: w.rig.patch_driver({"spec": {"tolerations": tolerations}}))
    w.tolerating = tolerating
    verb = "tolerates" if tolerating else "no longer tolerates"
    return f"the GPUDriver {verb} {MAINTENANCE_TAINT['key']}"


def mapping_literal(w: World, node: str, _choice: float) -> str:
    """The admin pins the kernel of the node drawn to a literal image (its tag written out, no
    template variable) by an anchored mapping before the templated one: the same image, a new
    KMM version all the same."""
    kernel = w.rig.hosts[node].kernel_release
    version = w.version or None
    mappings = [
        {"regexp": f"^{re.escape(kernel)}$", "containerImage": pushed_image(version, kernel)},
        *kernel_mappings(version),
    ]
    patch = {"spec": {"kernelModule": {"kernelMappings": mappings}}}
    retried(lambda: w.rig.patch_driver(patch))
    w.target = w.rig.target()
    return f"the GPUDriver maps {kernel} literally to {mappings[0]['containerImage']}"


def kmm_restart(w: World, _node: str, choice: float) -> str:
    """KMM's manager and webhook die (an OOM kill, a node drain) and come back: KMM's
    in-flight work is left as it was, writes to its Modules are refused while the webhook is
    down."""
    kmm = w.rig.kmm
    kmm.operator.kill()
    kmm.webhook.kill()
    down = choice * KMM_DOWN_SECONDS
    time.sleep(down)
    kmm.webhook.start()
    kmm.operator.start()
    return f"KMM's manager and webhook killed, back after {down:.1f} s"


def kill_leader(w: World, _node: str, _choice: float) -> str:
    leader = w.replicas.leader()
    if leader is None:
        return NoOp("no leader at that moment: nothing killed")
    w.replicas.kill(leader)
    return f"killed the leading coordinator {leader.identity}"


def chart_upgrade(w: World, _node: str, _choice: float) -> str:
    """`helm upgrade` of gpuctl's own chart mid-rollout, as the cluster sees it: the
    coordinator Deployment rolls its replicas one at a time (each SIGTERMed, a leader releasing
    its Lease), then the agent DaemonSet its Pods, node by node (maxUnavailable 1)."""
    w.replicas.roll()
    restarted = 0
    for node in w.nodes:
        agent = w.rig.agents.get(node)
        if agent is None:
            continue  # rebooting: its kubelet starts the new Pod when it is back
        agent.terminate()
        agent.wait()
        w.rig.start_agent(node)
        restarted += 1
    return f"helm upgrade: {len(w.replicas.slots)} coordinators and {restarted} agents rolled"


def agent_restart(w: World, node: str, _choice: float) -> str:
    agent = w.rig.agents.get(node)
    if agent is None:
        return NoOp(f"{node} has no agent running")
    agent.kill()
    agent.wait()
    w.rig.start_agent(node)
    return f"{node}'s agent killed and started again"


EVENTS: dict[str, Callable[[World, str, float], str]] = {
    "reboot-busy": reboot_busy,
    "reboot-idle": reboot_idle,
    "reboot-blacklisted": reboot_blacklisted,
    "reboot-new-kernel": reboot_new_kernel,
    "image-pushed": image_pushed,
    "workload-start": workload_start,
    "workload-end": workload_end,
    "admin-cordon": admin_cordon,
    "admin-uncordon": admin_uncordon,
    "admin-drain": admin_drain,
    "daemons-paused": daemons_paused,
    "daemons-undeclared": daemons_undeclared,
    "skip": skip,
    "taint": taint,
    "untaint": untaint,
    "unskip": unskip,
    "relabel-out": relabel_out,
    "relabel-in": relabel_in,
    "reregister": reregister,
    "undo": undo,
    "version-change": version_change,
    "pause-resume": pause_resume,
    "kmm-slow": kmm_slow,
    "kmm-restart": kmm_restart,
    "parameters-change": parameters_change,
    "tolerations-change": tolerations_change,
    "mapping-literal": mapping_literal,
    "kill-leader": kill_leader,
    "chart-upgrade": chart_upgrade,
    "agent-restart": agent_restart,
}
