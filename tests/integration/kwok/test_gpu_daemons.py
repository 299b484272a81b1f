"""A real GPU node is never idle: a GPU daemon on every node, paused for each node's step.

kwok nodes (kube-scheduler, the DaemonSet controller, kwok running the pods) under real KMM,
the real coordinator and agents. A real DaemonSet selects on gpuctl.dev/driver-ready=true; its
pods hold each node's render node open, in their own cgroups (testbed/rollout_live/
gpu_daemons.py stands in for the container runtime under them). The agent names each holder by
its pod UID, the coordinator by its pod and DaemonSet. Every test ends, as every rollout test
does (RolloutRig.close), asserting no unload was attempted on a busy node.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuctl.common import names
from testbed.harness.waiting import wait_until
from testbed.kwok_nodes import give_gpus
from testbed.rollout_live.gpu_daemons import DaemonRuntime, Started, daemon_set
from testbed.rollout_live.rig import NEW, OLD, RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, start, wait_complete

pytestmark = pytest.mark.integration

XPUMANAGER = "xpumanager"
EXPORTER = "exporter"
READY = {names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}


@pytest.fixture
def runtime(rollout_rig: RolloutRig) -> Iterator[DaemonRuntime]:
    started = DaemonRuntime(rollout_rig.kube, rollout_rig.namespace, rollout_rig.hosts).start()
    yield started
    started.stop()


def paused(rig: RolloutRig, *daemon_sets: str) -> dict[str, object]:
    return {
        **FAST,
        "pause": {"daemonSets": [f"{rig.namespace}/{d}" for d in daemon_sets], "timeout": "60s"},
    }


def on_every_node(runtime: DaemonRuntime, nodes: list[str]) -> dict[str, Started]:
    def check() -> dict[str, Started] | None:
        running = runtime.running()
        return running if set(running) >= set(nodes) else None

    return wait_until("a GPU daemon holding every node's render node", check, 120)


def test_a_fleet_where_every_node_runs_a_gpu_daemon_rolls_with_no_busy_unload(
    rollout_rig: RolloutRig, runtime: DaemonRuntime
) -> None:
    """XPU Manager (declared in rollout.pause) holds renderD128 on both nodes. Each node in
    turn: cordoned with the driver-ready label off in one write, its daemon's pod deleted by
    the DaemonSet controller (its process gone first), KMM reloads an idle node, the label
    goes back, the daemon's new pod is Ready on it, then it is Done and uncordoned."""
    rig = rollout_rig
    nodes = start(rig, ["a", "b"], paused(rig, XPUMANAGER))
    for node in nodes:
        give_gpus(rig.kube, node, 1)
        assert rig.node(node)["metadata"]["labels"][names.DRIVER_READY_LABEL] == "true"
    daemon_set(rig.kube, rig.namespace, XPUMANAGER, node_selector=READY)
    before = on_every_node(runtime, nodes)

    rig.set_version(NEW)
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=240)
    assert [module_version(rig, node) for node in nodes] == [NEW, NEW]
    wait_complete(rig)
    after = on_every_node(runtime, nodes)
    log = (rig.folder / "coordinator.log").read_text(errors="replace")
    for node in nodes:
        # The check named the daemon's pod as the GPU client the pause takes off the node.
        named = f"{rig.namespace}/{before[node].pod} (DaemonSet {rig.namespace}/{XPUMANAGER})"
        assert (
            f"waiting for paused pods to leave ({names.DRIVER_READY_LABEL} is off): {named}" in log
        )
        assert after[node].uid != before[node].uid  # paused, then back as a new pod
        stopped = runtime.history.index(("stopped", before[node]))
        restarted = runtime.history.index(("started", after[node]))
        assert stopped < restarted
        reason = rig.annotation(node, names.REASON)
        assert f"paused pods back: DaemonSet {rig.namespace}/{XPUMANAGER}" in reason, reason
        labels = rig.node(node)["metadata"]["labels"]
        assert labels[names.DRIVER_READY_LABEL] == "true"
        assert not rig.node(node)["spec"].get("unschedulable")
    assert sorted(rig.kernels.unloads) == sorted(nodes)  # each node reloaded once, idle
    assert rig.kernels.violations == []


def test_a_daemon_not_declared_pausable_blocks_the_node_named_by_its_pod(
    rollout_rig: RolloutRig, runtime: DaemonRuntime
) -> None:
    """An exporter DaemonSet the GPUDriver does not declare holds the render node: evicting
    its pod would only bring it back, so the node is Blocked before anything changes, the
    blocker naming the pod, its DaemonSet, the pid and the device; nothing is unloaded."""
    rig = rollout_rig
    [node] = start(rig, ["a"], paused(rig, XPUMANAGER))
    give_gpus(rig.kube, node, 1)
    daemon_set(rig.kube, rig.namespace, EXPORTER, node_selector=READY)
    [exporter] = on_every_node(runtime, [node]).values()

    rig.set_version(NEW)
    rig.wait_phases({node: "Blocked"}, timeout=120)
    reason = rig.annotation(node, names.REASON)
    expected = (
        f"pod {rig.namespace}/{exporter.pod} (DaemonSet {rig.namespace}/{EXPORTER}), "
        f"pid {exporter.pid} ({EXPORTER}), renderD128"
    )
    assert expected in reason, reason
    assert rig.annotation(node, names.REASON_KIND) == "open-clients"
    assert module_version(rig, node) == OLD
    assert rig.node(node)["metadata"]["labels"][names.DRIVER_READY_LABEL] == "true"
    assert not rig.node(node)["spec"].get("unschedulable")
    assert rig.kernels.unloads == []
