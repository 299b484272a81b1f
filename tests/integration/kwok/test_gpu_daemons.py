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

from coordinator.kube.client import MERGE_PATCH, path
from gpuctl.common import names
from testbed.fakehost.scenarios import B580
from testbed.harness.waiting import wait_until
from testbed.kwok_nodes import give_gpus
from testbed.rollout_live.gpu_daemons import (
    DaemonRuntime,
    Started,
    bare_pod,
    daemon_set,
)
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, start, wait_complete

pytestmark = pytest.mark.integration

XPUMANAGER = "xpumanager"
EXPORTER = "exporter"
READY = {names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}
# In the reason of every write that starts a node's drain (the cordon and the pause).
PAUSING = f"{names.DRIVER_READY_LABEL} off (GPU daemons paused)"


@pytest.fixture
def runtime(rollout_rig: RolloutRig) -> Iterator[DaemonRuntime]:
    started = DaemonRuntime(rollout_rig.kube, rollout_rig.namespace, rollout_rig.hosts).start()
    yield started
    started.stop()


def paused(rig: RolloutRig, *daemon_sets: str, timeout: str = "60s") -> dict[str, object]:
    return {
        **FAST,
        "pause": {"daemonSets": [f"{rig.namespace}/{d}" for d in daemon_sets], "timeout": timeout},
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


def test_a_declared_daemon_not_selecting_on_the_label_blocks_once_until_it_does(
    rollout_rig: RolloutRig, runtime: DaemonRuntime
) -> None:
    """XPU Manager is declared in rollout.pause, but its DaemonSet does not select on the
    driver-ready label: its pod stays when the label goes off. At the drain timeout the node is
    Blocked once (pause-not-selecting) naming the DaemonSet and what to add, uncordoned, its
    label back, nothing unloaded. Once the DaemonSet selects on the label through a required
    node affinity term (which its pods do not show: the DaemonSet controller replaces their
    terms with the node's name), its new pod replaces the old one, the node is paused and
    reloaded, and it is Done; drained twice in all, not once per drain timeout."""
    rig = rollout_rig
    [node] = start(rig, ["a"], paused(rig, XPUMANAGER))
    give_gpus(rig.kube, node, 1)
    daemon_set(rig.kube, rig.namespace, XPUMANAGER, node_selector={})
    [first] = on_every_node(runtime, [node]).values()

    rig.set_version(NEW)
    rig.wait_phases({node: "Blocked"}, timeout=120)
    reason = rig.annotation(node, names.REASON)
    assert rig.annotation(node, names.REASON_KIND) == "pause-not-selecting", reason
    assert f"{rig.namespace}/{first.pod} (DaemonSet {rig.namespace}/{XPUMANAGER})" in reason
    assert 'nodeSelector: {gpuctl.dev/driver-ready: "true"}' in reason
    assert module_version(rig, node) == OLD
    assert rig.node(node)["metadata"]["labels"][names.DRIVER_READY_LABEL] == "true"
    assert not rig.node(node)["spec"].get("unschedulable")
    log = rig.folder / "coordinator.log"
    paused_once = log.read_text(errors="replace").count(PAUSING)
    assert paused_once > 0

    term = {"key": names.DRIVER_READY_LABEL, "operator": "In", "values": ["true"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
    rig.kube.request(
        "PATCH",
        path("apps", "v1", "daemonsets", namespace=rig.namespace, name=XPUMANAGER),
        body={
            "spec": {
                "template": {
                    "spec": {
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": required
                            }
                        }
                    }
                }
            }
        },
        content_type=MERGE_PATCH,
    )
    rig.wait_phases({node: "Done"}, timeout=240)
    assert module_version(rig, node) == NEW
    assert ("stopped", first) in runtime.history
    [back] = on_every_node(runtime, [node]).values()
    assert back.uid != first.uid
    assert log.read_text(errors="replace").count(PAUSING) == 2 * paused_once
    assert rig.kernels.unloads == [node]
    assert rig.kernels.violations == []


def test_a_daemon_that_does_not_come_back_leaves_the_node_done_with_a_warning(
    rollout_rig: RolloutRig, runtime: DaemonRuntime
) -> None:
    """The paused daemon's new pod never starts (its node's runtime holds it Pending): the
    verified node waits pause.timeout for it, then is Done, uncordoned, with a Warning event
    naming the DaemonSet; it is not Failed."""
    rig = rollout_rig
    [node] = start(rig, ["a"], paused(rig, XPUMANAGER, timeout="3s"))
    give_gpus(rig.kube, node, 1)
    daemon_set(rig.kube, rig.namespace, XPUMANAGER, node_selector=READY)
    on_every_node(runtime, [node])
    runtime.hold(node)

    rig.set_version(NEW)
    rig.wait_phases({node: "Done"}, timeout=120)
    reason = rig.annotation(node, names.REASON)
    warning = f"WARNING: paused pods not back and Ready after 3s: DaemonSet {rig.namespace}/"
    assert warning + XPUMANAGER in reason, reason
    assert module_version(rig, node) == NEW
    assert rig.node(node)["metadata"]["labels"][names.DRIVER_READY_LABEL] == "true"
    assert not rig.node(node)["spec"].get("unschedulable")
    assert node not in runtime.running()
    assert rig.kernels.violations == []


def test_a_pod_holding_the_gpu_without_asking_for_one_is_evicted_like_a_gpu_pod(
    rollout_rig: RolloutRig, runtime: DaemonRuntime
) -> None:
    """A privileged pod of no controller holds renderD128 without a gpu.intel.com request: the
    agent names it, the coordinator drains it with the GPU pods (evictGPUPods), its process
    ends before its pod is gone, and the node is reloaded idle."""
    rig = rollout_rig
    [node] = start(rig, ["a"], {**FAST, "evictGPUPods": True})
    give_gpus(rig.kube, node, 1)
    bare_pod(rig.kube, rig.namespace, "debug-shell", node=node)
    [shell] = on_every_node(runtime, [node]).values()

    rig.set_version(NEW)
    rig.wait_phases({node: "Done"}, timeout=120)
    assert ("stopped", shell) in runtime.history
    gone = rig.kube.request(
        "GET",
        path("", "v1", "pods", namespace=rig.namespace),
        query={"fieldSelector": "metadata.name=debug-shell"},
    )
    assert gone["items"] == []
    assert module_version(rig, node) == NEW
    assert rig.kernels.violations == []


def test_a_host_process_holding_the_gpu_blocks_the_node_named_by_its_pid(
    rollout_rig: RolloutRig,
) -> None:
    """Xorg runs on the host (its cgroup a systemd service, not a pod): nothing the rollout
    may do ends it, so the node is Blocked before anything changes, naming the pid."""
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    host = rig.hosts[node]
    host.add_process(77, "Xorg", cgroup="0::/system.slice/display-manager.service\n")
    host.add_drm_fd(77, 5, "renderD128", pdev=B580, client_id=77)
    host.write("sys/module/xe/refcnt", "1\n")

    rig.set_version(NEW)
    rig.wait_phases({node: "Blocked"}, timeout=120)
    reason = rig.annotation(node, names.REASON)
    assert "host process pid 77 (Xorg), renderD128" in reason, reason
    assert module_version(rig, node) == OLD
    assert rig.kernels.unloads == []
