"""A Done node reboots: KMM's loader never removes what the boot brought up from under a GPU
daemon, and the node is Done again only once the out-of-tree `xe` is live and verified.

Real KMM (testbed/harness/real_kmm.py) under the real coordinator and agents; the reboot is
testbed/rollout_live/reboots.py: modules, bindings and processes gone, a new boot id, the
in-tree `xe` autoloaded or blacklisted, the kubelet posting the new boot id before it is Ready.
KMM's NodeModulesConfig reconciler then starts a loader (IsNodeRebooted), whose first act is
`modprobe -r` of the in-tree module. Every test ends, as every rollout test does
(RolloutRig.close), asserting no unload was attempted on a busy node.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common import names
from testbed.fakehost.scenarios import B580
from testbed.harness.waiting import wait_until
from testbed.rollout_live.fake_nodes import load_module
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.reboots import kubelet_ready, reboot
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    busy_with_ollama,
    gpu_pod,
    held_by,
    idle_again,
    module_version,
    start,
    wait_status,
)
from testbed.rollout_live.worker_hold_guard import installed_worker_hold_guard, wait_held

pytestmark = pytest.mark.integration


def provenance(rig: RolloutRig, node: str) -> str:
    """What the node's live xe is: the out-of-tree build KMM loads (taint O) or the kernel's."""
    taint = rig.hosts[node].real("sys/module/xe/taint").read_text()
    return "out-of-tree" if "O" in taint else "in-tree"


def reverified_status(status: dict[str, Any]) -> bool:
    return status.get("state") == "Complete" and status.get("updated") == status.get("total")


def test_a_reboot_never_unloads_the_autoloaded_in_tree_xe_under_its_daemon(
    rollout_rig: RolloutRig,
) -> None:
    """Two Done nodes reboot. On `a` nothing blacklists the in-tree `xe`: it loads at boot and a
    GPU daemon (pid 4242, ollama) opens it. On `b` it is blacklisted: nothing loads. The
    coordinator sees each new boot id while the kubelet is not Ready yet, holds KMM's worker
    off both nodes and takes them out of Done, cordoned. Once the agents answer: `b` is idle
    with nothing loaded, so KMM's worker is let go and loads the out-of-tree xe, verified:
    Done. `a` is Blocked naming the daemon, KMM's loader held off it; nothing is unloaded on it
    until the daemon stops; then it goes through the checks, KMM removes the idle in-tree
    module and loads its own, and it is Done again."""
    rig = rollout_rig
    a, b = start(rig, ["a", "b"], FAST)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        boots = {
            a: reboot(rig, a, in_tree_autoloads=True),
            b: reboot(rig, b, in_tree_autoloads=False),
        }
        busy_with_ollama(rig, a)  # the GPU daemon starts on the in-tree driver
        rig.wait_phases({a: "Verifying", b: "Verifying"})
        wait_held(rig.kube, rig.namespace, {a, b})
        for node in (a, b):
            assert rig.annotation(node, names.REBOOTED).startswith("boot ")
            assert rig.node(node)["spec"].get("unschedulable") is True
            kubelet_ready(rig, node, boots[node])

        rig.wait_phases({a: "Blocked", b: "Done"}, timeout=120)
        assert rig.annotation(a, names.REASON_KIND) == "rebooted-in-use"
        reason = rig.annotation(a, names.REASON)
        assert "module xe is the kernel's in-tree one, in use:" in reason, reason
        assert "pid 4242 (ollama)" in reason, reason
        assert "WARNING: the in-tree xe loads by itself at boot" in reason, reason
        wait_held(rig.kube, rig.namespace, {a})
        assert provenance(rig, a) == "in-tree"
        assert a not in rig.kernels.unloads
        assert provenance(rig, b) == "out-of-tree"
        assert module_version(rig, b) == OLD
        assert "verified again after the reboot" in rig.annotation(b, names.REASON)
        assert rig.node(b)["spec"].get("unschedulable") is not True
        status = rig.rollout_status()
        assert status["state"] != "Complete", status

        idle_again(rig, a)
        rig.wait_phases({a: "Done", b: "Done"}, timeout=120)
        assert provenance(rig, a) == "out-of-tree"
        assert module_version(rig, a) == OLD
        wait_held(rig.kube, rig.namespace, set())
        wait_status(rig, "says Complete again", reverified_status)
        assert rig.kernels.violations == []


def test_a_reboot_seen_only_once_ready_still_holds_kmms_loader_off_a_busy_node(
    rollout_rig: RolloutRig,
) -> None:
    """The kubelet posts the new boot id already Ready: KMM and the coordinator see the reboot
    at once, and KMM's loader Pod may be made before the hold. Its container has not started
    (held here as by a runtime still starting: the test lets it go only once the coordinator
    has acted); the hold deletes it, and admission refuses KMM's next one. The node is Blocked
    naming the daemon; nothing is unloaded, even with the container let go."""
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.kmm.hold_node(node)
        boot = reboot(rig, node, in_tree_autoloads=True)
        busy_with_ollama(rig, node)
        kubelet_ready(rig, node, boot)
        rig.wait_phases({node: "Blocked"}, timeout=120)
        assert rig.annotation(node, names.REASON_KIND) == "rebooted-in-use"
        wait_until(
            "KMM's held loader deleted",
            lambda: not rig.worker_pods(node=node),
            timeout_seconds=60,
        )
        rig.kmm.hold_node(node, held=False)
        assert node not in rig.kernels.unloads
        assert provenance(rig, node) == "in-tree"
        idle_again(rig, node)
        rig.wait_phases({node: "Done"}, timeout=120)
        assert provenance(rig, node) == "out-of-tree"
        assert rig.kernels.violations == []


def test_reboots_mid_rollout_of_nodes_waiting_their_turn_and_blocked(
    rollout_rig: RolloutRig,
) -> None:
    """An upgrade to NEW: `a` is Blocked by a daemon on the old module, `b` goes to NEW and the
    rollout holds after it (its first node). Then `a` reboots with the in-tree `xe`
    autoloaded and the daemon back on it, and `c`, Done at OLD waiting for its turn, reboots
    with the in-tree `xe` blacklisted (nothing loads). KMM runs a loader on both at their new
    boot (its Module selects them at OLD): the coordinator holds it off both; `c` is let go
    to load OLD and is verified Done at OLD again (its turn has not come), `a` stays Blocked
    naming the daemon, nothing unloaded on it. Resumed and `a` idle, all go to NEW."""
    rig = rollout_rig
    a, b, c = start(rig, ["a", "b", "c"], {**FAST, "holdAfterFirstNode": True})
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    busy_with_ollama(rig, a)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.set_version(NEW)
        status = wait_status(rig, f"says Held for {new}", held_by(new, "held after the first"))
        rig.wait_phases({a: "Blocked", b: "Done"}, version=new)
        boots = {
            a: reboot(rig, a, in_tree_autoloads=True),
            c: reboot(rig, c, in_tree_autoloads=False),
        }
        busy_with_ollama(rig, a)  # the daemon starts again, on the in-tree driver
        rig.wait_phases({a: "Verifying", c: "Verifying"}, version=old)
        wait_held(rig.kube, rig.namespace, {a, c})
        assert "while Blocked" in rig.annotation(a, names.REASON)
        for node in (a, c):
            labels = rig.node(node)["metadata"].get("labels") or {}
            assert names.DRIVER_READY_LABEL not in labels
            kubelet_ready(rig, node, boots[node])
        rig.wait_phases({a: "Blocked", c: "Done"}, timeout=120, version=old)
        assert rig.annotation(a, names.REASON_KIND) == "rebooted-in-use"
        assert provenance(rig, c) == "out-of-tree"
        assert module_version(rig, c) == OLD
        assert provenance(rig, a) == "in-tree"
        assert a not in rig.kernels.unloads
        assert rig.state(b) == f"Done {new}"

        idle_again(rig, a)
        rig.patch_driver(
            {
                "metadata": {"annotations": {names.RESUMED_VERSION: status["targetVersion"]}},
                "spec": {"rollout": {"paused": False}},
            }
        )
        rig.wait_phases({a: "Done", b: "Done", c: "Done"}, timeout=180, version=new)
        assert module_version(rig, a) == NEW
        assert module_version(rig, c) == NEW
        assert rig.kernels.violations == []


def test_kmm_slow_after_a_reboot_is_waited_for_not_failed(rollout_rig: RolloutRig) -> None:
    """A Done node reboots with the in-tree `xe` blacklisted: nothing loads, nothing is in
    use, and KMM's worker is let go. KMM is slow to start its loader there (held here as an
    image pull that takes longer than timeouts.verify). Past the timeout the node is not
    Failed with KMM held off it (no driver until `rollout retry`): it waits, Verifying, its
    reason saying what KMM waits for; once KMM's loader runs it is Done again."""
    rig = rollout_rig
    # A verify timeout the agent's restart after the boot (a few seconds) fits in many times
    # over on a busy machine; the test waits it out once.
    [node] = start(rig, ["a"], {**FAST, "timeouts": {**TIMEOUTS, "verify": "30s"}})
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.kmm.hold_node(node)  # KMM's worker containers do not start there for now
        boot = reboot(rig, node, in_tree_autoloads=False)
        kubelet_ready(rig, node, boot)
        wait_until(
            "the node waiting on KMM past timeouts.verify",
            lambda: "past timeouts.verify" in rig.annotation(node, names.REASON),
            timeout_seconds=240,
        )
        assert rig.state(node) == f"Verifying {rig.target()}"
        reason = rig.annotation(node, names.REASON)
        assert "nothing holds the device, so KMM is let finish" in reason, reason
        wait_held(rig.kube, rig.namespace, set())
        rig.kmm.hold_node(node, held=False)
        rig.wait_phases({node: "Done"}, timeout=120)
        assert provenance(rig, node) == "out-of-tree"
        assert module_version(rig, node) == OLD
        status = rig.rollout_status()
        assert status["counts"]["Failed"] == 0, status
        assert rig.kernels.violations == []


def test_a_host_copy_live_at_boot_is_done_only_once_kmm_loaded_it_in_this_boot(
    rollout_rig: RolloutRig,
) -> None:
    """A Done node reboots and a host copy of the same build (DKMS) loads at boot: the module
    the agent shows is the one verified, KMM's ready labels are on, but KMM's loader has not
    run in this boot (its NodeModulesConfig records the boot before). KMM will run it there;
    had the node been Done on the agent's word alone, that loader would `modprobe -r` a
    module a daemon opens once the node is uncordoned. So it is Done only once KMM's loader
    ran in this boot (let go while the copy is idle)."""
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    before = rig.kmm.loaded(rig.module, node)
    assert before is not None
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        boot = reboot(rig, node, in_tree_autoloads=False)
        host = rig.hosts[node]
        load_module(host, OLD)  # the host's DKMS copy, autoloaded at boot
        host.bind(B580, "xe")
        kubelet_ready(rig, node, boot)
        # Done in this boot (the Done of the boot before does not count).
        wait_until(
            f"{node} Done in its new boot",
            lambda: (
                boot in rig.annotation(node, names.VERIFIED_BOOT)
                and rig.state(node).startswith("Done ")
            ),
            timeout_seconds=120,
        )
        loaded = rig.kmm.loaded(rig.module, node)
        assert loaded is not None
        assert loaded.boot_id == boot != before.boot_id  # KMM's loader ran in this boot first
        assert module_version(rig, node) == OLD
        assert rig.kernels.violations == []


def test_reboots_of_an_opted_out_node_and_one_mid_drain_keep_the_driver_they_had(
    rollout_rig: RolloutRig,
) -> None:
    """An upgrade to NEW: `a` is opted out (Skipped, KMM still loads OLD there), `b` drains,
    waiting for a GPU pod that does not leave (eviction off). `a` reboots with the in-tree
    `xe` autoloaded and a daemon on it; `b` reboots with it blacklisted. KMM runs a loader on
    both at their new boot: the coordinator holds it off both. `b` is verified again at OLD
    (KMM let go, OLD loaded in this boot) and then takes its step up again; `a` stays Blocked
    naming the daemon, nothing unloaded; idle, it is verified again at OLD and Skipped: an
    opted-out node keeps the driver it had, and is never taken to NEW."""
    rig = rollout_rig
    rollout = {**FAST, "evictGPUPods": False, "timeouts": {**TIMEOUTS, "drain": "5m"}}
    a, b = start(rig, ["a", "b"], rollout)
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    rig.label_node(a, {names.OPT_OUT_LABEL: names.OPT_OUT_VALUE})
    gpu_pod(rig, b)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.set_version(NEW)
        rig.wait_phases({a: "Skipped", b: "Draining"}, version=new)
        boots = {
            a: reboot(rig, a, in_tree_autoloads=True),
            b: reboot(rig, b, in_tree_autoloads=False),
        }
        busy_with_ollama(rig, a)
        rig.wait_phases({a: "Verifying", b: "Verifying"}, version=old)
        wait_held(rig.kube, rig.namespace, {a, b})
        assert "while Draining" in rig.annotation(b, names.REASON)
        assert "while Skipped" in rig.annotation(a, names.REASON)
        for node in (a, b):
            kubelet_ready(rig, node, boots[node])
        wait_until(
            f"{b} verified at OLD in its new boot",
            lambda: boots[b] in rig.annotation(b, names.VERIFIED_BOOT),
            timeout_seconds=120,
        )
        loaded = rig.kmm.loaded(rig.module, b)
        assert loaded is not None
        assert loaded.boot_id == boots[b]
        assert module_version(rig, b) == OLD
        rig.wait_phases({a: "Blocked"}, timeout=120, version=old)
        assert rig.annotation(a, names.REASON_KIND) == "rebooted-in-use"
        assert provenance(rig, a) == "in-tree"
        assert a not in rig.kernels.unloads
        idle_again(rig, a)
        rig.wait_phases({a: "Skipped"}, timeout=120, version=new)
        assert provenance(rig, a) == "out-of-tree"
        assert module_version(rig, a) == OLD  # opted out: the driver it had, not NEW
        assert rig.kernels.violations == []
