"""kured's reboot lock and a rollout, on KMM's own operator: while kured holds it (it is
rebooting a node) no node starts and the rollout says so (KuredRebooting, naming kured's
node); once kured lets go, the coordinator takes the lock before the first node's step, so a
kured Pod asking for it mid-step is refused; and once the rollout is done the coordinator
lets it go, so kured reboots again. kured's side is testbed/kured.py (kured's own binary is
not on the Go module proxy here: docs/maintenance.md#kured)."""

from __future__ import annotations

import pytest

from gpuctl.rollout.input.kured_lock import GPUCTL_HOLDER
from testbed import kured
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, start, wait_status

pytestmark = pytest.mark.integration

IN_A_STEP = ("Checking", "Draining", "Preparing", "Loading", "Verifying")


def test_kured_and_the_rollout_never_act_on_nodes_at_once(rollout_rig: RolloutRig) -> None:
    rig = rollout_rig
    kured.daemon_set(rig.kube, rig.namespace)
    first, second = start(rig, ["a", "b"], FAST, [f"--kured-lock={rig.namespace}/kured"])
    assert kured.holder(rig.kube, rig.namespace) == ""  # nothing in a step: gpuctl holds none
    # kured takes its lock to reboot the second node; then the driver moves on.
    assert kured.acquire(rig.kube, rig.namespace, second) == (True, second)
    before = rig.target()
    rig.set_version(NEW)
    target = rig.target()
    status = wait_status(
        rig,
        f"held while kured reboots {second}",
        lambda s: s.get("targetVersion") == target and s.get("holdKind") == "KuredRebooting",
    )
    assert f"kured holds its reboot lock: {second}" in status["message"]
    assert {rig.state(first), rig.state(second)} == {f"Done {before}"}
    # kured's node is back: kured lets go. The coordinator takes the lock for its first node.
    rig.kmm.hold_node(first)  # KMM's worker there waits: the node stays mid-step
    kured.release(rig.kube, rig.namespace, second)
    wait_until(
        f"{first} in a step at {target}, the lock gpuctl's",
        lambda: (
            rig.state(first).split()[0] in IN_A_STEP
            and kured.holder(rig.kube, rig.namespace) == GPUCTL_HOLDER
        ),
        timeout_seconds=60,
    )
    # A kured Pod that wants to reboot the node mid-step is refused, as kured's Acquire is.
    assert kured.acquire(rig.kube, rig.namespace, first) == (False, GPUCTL_HOLDER)
    rig.kmm.hold_node(first, held=False)
    rig.wait_phases({first: "Done", second: "Done"}, timeout=120)
    assert (module_version(rig, first), module_version(rig, second)) == (NEW, NEW)
    wait_until(
        "the coordinator lets kured's lock go once no node is in a step",
        lambda: kured.holder(rig.kube, rig.namespace) == "",
        timeout_seconds=30,
    )
    assert kured.acquire(rig.kube, rig.namespace, second) == (True, second)
    assert rig.kernels.violations == []
