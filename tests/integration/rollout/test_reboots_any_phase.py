"""Nodes reboot in every phase of an upgrade, on KMM's own operator: never unloaded busy, held
and verified again at the version KMM loads there, and each ends with a driver.

The unit tests (tests/rollout/step/test_reboots_any_phase.py) take a reboot in each phase through
the decision (gpuctl/rollout/step/reboots.py, `reboot_taken_up`); here the real coordinator, agents
and KMM (testbed/harness/real_kmm.py) do it. The reboot is testbed/rollout_live/reboots.py:
the kubelet posts the new boot id not Ready yet, and KMM's NodeModulesConfig reconciler then
starts a loader on every node its Module selects with a version label (IsNodeRebooted), whose
first act is `modprobe -r` of the in-tree `xe`. A node is kept in a phase by what slows it in
a real fleet: its image probe's or KMM's worker's container slow to start
(`RealKmm.hold_probes`, `hold_node`: an image pull), its agent not answering yet. Every test
ends (RolloutRig.close) asserting no unload was attempted on a busy node.

The worker hold list is proven here too: a node the namespace's list names, deleted (`kubectl
delete node`) and registered again under its name, leaves the list (coordinator/rollout/
worker_holds.py makes it of the Nodes) and KMM loads it through the rollout. A node registered
again that reboots with the in-tree `xe` blacklisted (KMM loads nothing there any more) gets a
driver at once, without waiting for a maxUnavailable slot (gpuctl/rollout/input/driverless.py).
"""

from __future__ import annotations

import subprocess

import pytest

from gpuctl.common import names
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.reboots import kubelet_ready, reboot, register_again
from testbed.rollout_live.rig import BIN, RolloutRig, stop_process
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    busy_with_ollama,
    idle_again,
    module_version,
    start,
)
from testbed.rollout_live.worker_hold_guard import (
    held_nodes,
    installed_worker_hold_guard,
    wait_held,
)

pytestmark = pytest.mark.integration


def provenance(rig: RolloutRig, node: str) -> str:
    """What the node's live xe is: the out-of-tree build KMM loads (taint O) or the kernel's."""
    taint = rig.hosts[node].real("sys/module/xe/taint").read_text()
    return "out-of-tree" if "O" in taint else "in-tree"


def _meta(rig: RolloutRig, node: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """ "<phase> <version>", the labels and the annotations, from one read of the Node."""
    meta = rig.node(node)["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    state = f"{labels.get(names.STATE_LABEL, '')} {annotations.get(names.STATE_VERSION, '')}"
    return state, labels, annotations


def wait_taken_up(rig: RolloutRig, node: str, boot: str, state: str) -> dict[str, str]:
    """Waits until the coordinator has taken up `node`'s reboot into `boot` and the node is
    in `state` ("<phase> <version>"); returns its annotations then."""

    def check() -> dict[str, str] | None:
        now, _, annotations = _meta(rig, node)
        taken = boot in annotations.get(names.REBOOT_TAKEN_UP, "")
        return annotations if taken and now == state else None

    return wait_until(f"{node}'s boot {boot[:8]} taken up, {state}", check, timeout_seconds=60)


def wait_done_in_boot(rig: RolloutRig, node: str, boot: str, version: str) -> dict[str, str]:
    """Waits until `node` is Done at `version`, verified in `boot` (a Done of the boot before
    does not count); returns its annotations then."""

    def check() -> dict[str, str] | None:
        now, _, annotations = _meta(rig, node)
        verified = boot in annotations.get(names.VERIFIED_BOOT, "")
        return annotations if verified and now == f"Done {version}" else None

    return wait_until(f"{node} Done at {version} in boot {boot[:8]}", check, timeout_seconds=120)


def wait_workers_gone(rig: RolloutRig, node: str) -> None:
    """Waits until KMM has no worker Pod on `node`: the hold deleted the ones it had made,
    and admission refuses the next."""
    wait_until(
        f"KMM's worker Pods on {node} deleted",
        lambda: not rig.worker_pods(node=node),
        timeout_seconds=60,
    )


def assert_loaded_by_kmm_in(rig: RolloutRig, node: str, boot: str, version: str) -> None:
    loaded = rig.kmm.loaded(rig.module, node)
    assert loaded is not None
    assert (loaded.version, loaded.boot_id) == (rig.kmm_version_at(version), boot)
    assert provenance(rig, node) == "out-of-tree"
    assert module_version(rig, node) == version


def test_reboots_while_checking_loading_and_verifying_an_upgrade(rollout_rig: RolloutRig) -> None:
    """An upgrade to NEW on three nodes at once. `c` reboots in Checking (its image probe's
    container slow to start), the in-tree `xe` autoloaded and a daemon (pid 4242, ollama)
    opening it; `d` in Loading (KMM's worker slow to start: KMM has not acted on the write),
    blacklisted; `e` in Verifying (KMM loaded NEW, its agent has not answered), the in-tree
    `xe` autoloaded and idle. KMM runs a loader at each new boot: the coordinator holds it off
    all three and takes each to Verifying at the version KMM loads there: OLD on `c` (not
    written yet), NEW on `d` and `e` (written). `c` is Blocked naming the daemon, nothing
    unloaded; once idle it is Done at OLD in its new boot. `d` and `e` are let go, KMM loads
    NEW in their new boots (on `e` first removing the idle in-tree module), Done at NEW."""
    rig = rollout_rig
    timeouts = {**TIMEOUTS, "load": "40s", "verify": "60s"}
    c, d, e = start(rig, ["c", "d", "e"], {**FAST, "maxUnavailable": 3, "timeouts": timeouts})
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.kmm.hold_probes(c)  # c's image probe: the check waits for its proof
        rig.kmm.hold_node(d)
        rig.kmm.hold_node(e)
        rig.set_version(NEW)

        rig.wait_phases({c: "Checking"}, version=new)
        boots = {c: reboot(rig, c, in_tree_autoloads=True)}
        busy_with_ollama(rig, c)  # the daemon starts on the in-tree driver
        rig.kmm.hold_probes(c, held=False)
        rig.wait_phases({d: "Loading", e: "Loading"}, version=new)
        boots[d] = reboot(rig, d, in_tree_autoloads=False)
        stop_process(rig.agents[e])  # e's agent will not answer its verification
        rig.kmm.hold_node(e, held=False)
        rig.wait_phases({e: "Verifying"}, version=new)
        assert names.REBOOTED not in rig.node(e)["metadata"].get("annotations", {})
        boots[e] = reboot(rig, e, in_tree_autoloads=True)

        was = {c: ("Checking", old), d: ("Loading", new), e: ("Verifying", new)}
        for node, (phase, version) in was.items():
            annotations = wait_taken_up(rig, node, boots[node], f"Verifying {version}")
            assert f"while {phase}" in annotations[names.REASON], annotations[names.REASON]
            assert annotations[names.KMM_WORKER_HELD] == version
            labels = rig.node(node)["metadata"].get("labels") or {}
            assert names.DRIVER_READY_LABEL not in labels
            assert rig.node(node)["spec"].get("unschedulable") is True
        wait_held(rig.kube, rig.namespace, {c, d, e})
        wait_workers_gone(rig, d)
        rig.kmm.hold_node(d, held=False)  # only gpuctl's hold keeps KMM's worker off d now
        for node in (c, d, e):
            kubelet_ready(rig, node, boots[node])

        rig.wait_phases({c: "Blocked"}, timeout=120, version=old)
        assert rig.annotation(c, names.REASON_KIND) == "rebooted-in-use"
        reason = rig.annotation(c, names.REASON)
        assert "pid 4242 (ollama)" in reason, reason
        wait_done_in_boot(rig, d, boots[d], new)
        assert_loaded_by_kmm_in(rig, d, boots[d], NEW)
        annotations = wait_done_in_boot(rig, e, boots[e], new)
        assert_loaded_by_kmm_in(rig, e, boots[e], NEW)  # the idle in-tree xe removed first
        reason = annotations[names.REASON]
        assert "WARNING: the in-tree xe loads by itself at boot" in reason, reason
        assert provenance(rig, c) == "in-tree"
        assert c not in rig.kernels.unloads
        wait_held(rig.kube, rig.namespace, {c})

        # Paused: c, Done at OLD again, does not go on to NEW while the test looks at it.
        rig.patch_driver({"spec": {"rollout": {"paused": True}}})
        idle_again(rig, c)
        wait_done_in_boot(rig, c, boots[c], old)
        assert_loaded_by_kmm_in(rig, c, boots[c], OLD)
        assert rig.kernels.violations == []


def gpuctl(rig: RolloutRig, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "gpuctl"), *args, "--kubeconfig", str(rig.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_reboots_while_failed_and_pending_and_a_held_node_registered_again(
    rollout_rig: RolloutRig,
) -> None:
    """An upgrade to NEW whose loads time out on `f` and `p` (KMM's worker slow to start):
    both Failed, KMM's write left on (the old module is still loaded). `f` reboots Failed,
    the in-tree `xe` autoloaded and a daemon on it: held, still Failed, saying it rebooted;
    KMM's loader is refused there, nothing unloaded. `p`, retried (`gpuctl rollout retry`), is
    Pending at NEW, labelled for NEW, KMM not loaded yet (f's failure holds the rollout); it
    reboots, blacklisted: verified again at NEW, the version KMM's label asks, KMM let go,
    Done at NEW in its new boot. Then `f`, still on the namespace's worker hold list, is
    deleted and registered again under its name, idle: it leaves the list, and the rollout
    takes it as a new node to NEW, KMM's loader let run on it."""
    rig = rollout_rig
    f, p = start(rig, ["f", "p"], {**FAST, "maxUnavailable": 2})
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.kmm.hold_node(f)
        rig.kmm.hold_node(p)
        rig.set_version(NEW)
        rig.patch_driver({"spec": {"rollout": {"timeouts": {"load": "5s"}}}})
        rig.wait_phases({f: "Failed", p: "Failed"}, version=new)
        rig.patch_driver({"spec": {"rollout": {"timeouts": {"load": "60s", "verify": "60s"}}}})
        for node in (f, p):
            assert (rig.node(node)["metadata"].get("labels") or {})[rig.labels.version] == new

        boot_f = reboot(rig, f, in_tree_autoloads=True)
        busy_with_ollama(rig, f)
        annotations = wait_taken_up(rig, f, boot_f, f"Failed {new}")
        assert "rebooted since" in annotations[names.REASON], annotations[names.REASON]
        assert annotations[names.KMM_WORKER_HELD] == new
        assert names.DRIVER_READY_LABEL not in (rig.node(f)["metadata"].get("labels") or {})
        wait_held(rig.kube, rig.namespace, {f})
        wait_workers_gone(rig, f)
        rig.kmm.hold_node(f, held=False)  # only gpuctl's hold keeps KMM's loader off f now
        kubelet_ready(rig, f, boot_f)

        gpuctl(rig, "rollout", "retry", p)
        rig.wait_phases({p: "Pending"}, version=new)
        loaded = rig.kmm.loaded(rig.module, p)
        assert loaded is not None
        assert loaded.version == old  # labelled for NEW, KMM has not loaded it
        boot_p = reboot(rig, p, in_tree_autoloads=False)
        annotations = wait_taken_up(rig, p, boot_p, f"Verifying {new}")
        assert "while Pending" in annotations[names.REASON], annotations[names.REASON]
        wait_held(rig.kube, rig.namespace, {f, p})
        wait_workers_gone(rig, p)
        rig.kmm.hold_node(p, held=False)
        kubelet_ready(rig, p, boot_p)
        wait_done_in_boot(rig, p, boot_p, new)
        assert_loaded_by_kmm_in(rig, p, boot_p, NEW)
        wait_held(rig.kube, rig.namespace, {f})
        assert rig.state(f) == f"Failed {new}"
        assert provenance(rig, f) == "in-tree"
        assert f not in rig.kernels.unloads

        idle_again(rig, f)
        register_again(rig, f, boot_f)
        wait_held(rig.kube, rig.namespace, set())
        wait_done_in_boot(rig, f, boot_f, new)
        assert_loaded_by_kmm_in(rig, f, boot_f, NEW)
        assert f not in held_nodes(rig.kube, rig.namespace)
        assert rig.kernels.violations == []


def test_a_node_registered_again_that_reboots_blacklisted_gets_a_driver_without_waiting(
    rollout_rig: RolloutRig,
) -> None:
    """The world run's seed 1 (bench.world, its event 173): a node deleted and registered
    again lost KMM's labels with its old Node object (and its NodeModulesConfig with them), so
    KMM loads nothing there at its next boot; it rebooted with the in-tree `xe` blacklisted and
    waited driverless, Pending, for its turn. Here: an upgrade to NEW one node at a time, `a`
    held in Loading (KMM's worker slow to start). `c`, Done at OLD, is registered again, then
    reboots blacklisted: its agent reports the GPU with no driver, so it starts at once, outside
    maxUnavailable (it had no capacity to take away), and is Done at NEW, KMM's loader run in
    its new boot, while `a` is still held and `b` waits its turn."""
    rig = rollout_rig
    timeouts = {**TIMEOUTS, "load": "300s"}
    a, b, c = start(rig, ["a", "b", "c"], {**FAST, "maxUnavailable": 1, "timeouts": timeouts})
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    rig.kmm.hold_node(a)
    rig.set_version(NEW)
    rig.wait_phases({a: "Loading"}, version=new)

    register_again(rig, c, str(rig.node(c)["status"]["nodeInfo"]["bootID"]))
    rig.wait_phases({c: "Pending"}, version=new)
    boot = reboot(rig, c, in_tree_autoloads=False)
    kubelet_ready(rig, c, boot)

    annotations = wait_done_in_boot(rig, c, boot, new)
    assert_loaded_by_kmm_in(rig, c, boot, NEW)
    assert names.STARTED_DRIVERLESS not in annotations  # dropped once Done
    assert rig.state(a) == f"Loading {new}"
    assert rig.state(b) == f"Done {old}"  # its labels untouched until its turn

    rig.kmm.hold_node(a, held=False)
    rig.wait_phases({a: "Done", b: "Done"}, timeout=120, version=new)
    assert rig.kernels.violations == []


NEXT_KERNEL = "6.8.0-62-generic"  # the distro's next ABI, installed by an unattended upgrade


def test_a_node_the_rollout_has_not_reached_that_reboots_into_a_new_kernel_gets_the_target(
    rollout_rig: RolloutRig,
) -> None:
    """The world run (its short CI world, event 45): a node still at OLD, waiting its turn,
    reboots into a new kernel whose images are pushed. KMM leaves the NodeModulesConfig of a
    node whose label is not the Module's version as it is (prepareNodeSchedulingData), config
    for the old kernel included: let go, its loader took the in-tree xe out and then failed for
    ever ("Module xe not found in directory .../lib/modules/6.8.0-62-generic",
    CrashLoopBackOff). Now its worker stays held and the node goes through the checks for the
    target, which KMM configures for the kernel the node runs: Done at NEW in its new boot
    while the node ahead of it is still loading."""
    rig = rollout_rig
    timeouts = {**TIMEOUTS, "load": "300s"}
    ahead, behind = start(rig, ["a", "b"], {**FAST, "maxUnavailable": 1, "timeouts": timeouts})
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    for version in (OLD, NEW):
        rig.publish(version, NEXT_KERNEL)
    rig.kmm.hold_node(ahead)
    rig.set_version(NEW)
    rig.wait_phases({ahead: "Loading"}, version=new)
    assert rig.state(behind) == f"Done {old}"

    boot = reboot(rig, behind, in_tree_autoloads=True, kernel=NEXT_KERNEL)
    kubelet_ready(rig, behind, boot)

    wait_done_in_boot(rig, behind, boot, new)
    assert_loaded_by_kmm_in(rig, behind, boot, NEW)
    # KMM's loader never ran its stale config there: no load failed, the in-tree xe was taken
    # out only by the load of the target.
    failed = [c.describe() for c in rig.kmm.load_calls() if c.node == behind and not c.succeeded]
    assert failed == []
    assert rig.state(ahead) == f"Loading {new}"
    rig.kmm.hold_node(ahead, held=False)
    rig.wait_phases({ahead: "Done", behind: "Done"}, timeout=120, version=new)
