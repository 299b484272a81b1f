"""Every change KMM would act on goes through the node checks: the unload triggers, end to end.

KMM unloads `xe` not only when a version label changes (KMM's own operator runs here,
testbed/harness/real_kmm.py): on any change of a node's module config (nmc_reconciler.go), when
a node gets a NoSchedule/NoExecute taint the Module does not tolerate or stops being selected
(module_reconciler.go), and at every first load, whose loader removes the live `xe` first
(worker.go). Each test puts a busy node beside idle ones, makes the change, and shows: no
unload while busy (the nodes' kernel record, checked again when the rig closes), the busy
node named with why, and the idle nodes converging. A KMM write taken off a node mid-load is
written again only after the checks. Triggers covered elsewhere: a node leaving the selector,
a version changed mid-rollout and deletion node by node (test_end_to_end.py), a
discovery blip during a deletion and mapping loss (tests/integration/drivers/test_targeting.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.policies import worker_hold_guard
from gpuctl.common import names
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580, arc_b580_in_tree
from testbed.harness.kmm_build import DEFAULT_VERSION, MAIN_VERSION
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    busy_with_ollama,
    gpu_pod,
    idle_again,
    module_version,
    old_root,
    start,
    wait_status,
)
from testbed.rollout_live.worker_hold_guard import (
    installed_worker_hold_guard,
    refused_worker_pod,
    wait_held,
)
from tests.support.kmm_matrix import EACH_KMM

pytestmark = pytest.mark.integration

TWO_AT_ONCE: dict[str, Any] = {**FAST, "maxUnavailable": 2}
IMAGE = "image"  # the same version built again (rig.publish_rebuild)
PARAMETERS = "parameters"
# One change of each kind KMM sees: the image (a rebuild under the same version) and a field of
# the node's config. That every other field of it (firmware path, loading order, registry TLS,
# the in-tree list, ...) is a new KMM version is tests/gpudriver/test_module_spec.py's
# (test_every_config_change_is_a_new_version); KMM reloads on any of them alike
# (nmc_reconciler.go ProcessModuleSpec compares the whole config).
CONFIG_CHANGES: dict[str, dict[str, Any]] = {
    IMAGE: {},
    PARAMETERS: {"parameters": ["max_vfs=7"]},
}


def assert_no_unload_while_busy(rig: RolloutRig) -> None:
    assert rig.kernels.violations == []
    assert rig.kmm.unloads_while_busy() == []


def wait_named_in_status(rig: RolloutRig, node: str, words: str) -> None:
    def names_it(status: dict[str, Any]) -> bool:
        rows = [row for row in status.get("nodes") or [] if row.get("name") == node]
        return bool(rows) and words in str(rows[0].get("reason", ""))

    wait_status(rig, f"names {node} with {words!r}", names_it)


# Each kind at the pinned release, and one at KMM main.
CONFIG_CASES = [(DEFAULT_VERSION, IMAGE), (DEFAULT_VERSION, PARAMETERS), (MAIN_VERSION, PARAMETERS)]


@pytest.mark.parametrize(
    ("kmm_version", "change"),
    [(version, CONFIG_CHANGES[kind]) for version, kind in CONFIG_CASES],
    ids=[f"{kind}-{version}" for version, kind in CONFIG_CASES],
)
def test_a_config_change_in_place_reloads_the_idle_nodes_and_not_the_busy_one(
    rollout_rig: RolloutRig, change: dict[str, Any]
) -> None:
    rig = rollout_rig
    idle, busy, other = start(rig, ["a", "b", "c"], TWO_AT_ONCE)
    change = change or rig.publish_rebuild(OLD)
    busy_with_ollama(rig, busy)
    before = rig.target()
    loads_before = len(rig.kernels.loads)
    rig.patch_driver({"spec": {"kernelModule": change}})
    assert rig.target() != before  # a config change is a new KMM version
    rig.wait_phases({idle: "Done", busy: "Blocked", other: "Done"}, timeout=90)
    wait_named_in_status(rig, busy, "pid 4242 (ollama)")
    assert rig.node(busy)["metadata"]["labels"][rig.labels.version] == before
    assert len(rig.kernels.loads) - loads_before == 2  # the idle nodes, reloaded once each
    assert_no_unload_while_busy(rig)
    idle_again(rig, busy)
    rig.wait_phases({idle: "Done", busy: "Done", other: "Done"}, timeout=60)
    assert_no_unload_while_busy(rig)


def test_a_pod_requesting_a_gpu_keeps_its_node_from_an_image_change(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    quick_drain = {
        **TWO_AT_ONCE,
        "timeouts": {**TWO_AT_ONCE["timeouts"], "drain": "3s"},
    }
    idle, busy = start(rig, ["a", "b"], quick_drain)
    rebuilt = rig.publish_rebuild(OLD)
    pod = gpu_pod(rig, busy)
    rig.patch_driver({"spec": {"kernelModule": rebuilt}})
    rig.wait_phases({idle: "Done", busy: "Blocked"}, timeout=90)
    wait_named_in_status(rig, busy, f"GPU pods {rig.namespace}/{pod}")
    assert busy not in rig.kernels.unloads
    assert_no_unload_while_busy(rig)


def taint(rig: RolloutRig, node: str, taints: list[dict[str, str]]) -> None:
    rig.kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"spec": {"taints": taints}},
        content_type="application/merge-patch+json",
    )


NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
AUTOSCALER = {
    "key": "ToBeDeletedByClusterAutoscaler",
    "value": "1764500000",
    "effect": "NoSchedule",
}


@pytest.mark.parametrize("blip", [NOT_READY, AUTOSCALER], ids=["not-ready", "autoscaler"])
def test_a_scheduling_taint_unloads_nothing(rollout_rig: RolloutRig, blip: dict[str, str]) -> None:
    rig = rollout_rig
    busy, idle = start(rig, ["a", "b"], TWO_AT_ONCE)
    busy_with_ollama(rig, busy)
    attempts_before = len(rig.kmm.unload_calls())
    for node in (busy, idle):
        taint(rig, node, [blip])
    # KMM's answer to a taint is immediate (its reconcile of the Node); give it the time two
    # seconds of NotReady give it, watching that nothing starts, then lift the taint.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert len(rig.kmm.unload_calls()) == attempts_before
        time.sleep(0.1)
    for node in (busy, idle):
        taint(rig, node, [])
    assert rig.kmm.spec_entry(rig.module, busy) is not None  # still configured: no unloader
    assert len(rig.kmm.unload_calls()) == attempts_before
    assert rig.state(busy) == f"Done {rig.target()}"
    assert rig.state(idle) == f"Done {rig.target()}"
    assert module_version(rig, busy) == OLD
    assert_no_unload_while_busy(rig)


@EACH_KMM
def test_a_first_install_never_reloads_a_node_whose_in_tree_xe_is_in_use(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig

    def in_tree(path: Any) -> FakeHost:
        return arc_b580_in_tree(path)

    busy = rig.add_node("busy", in_tree, labelled=False)
    idle = rig.add_node("idle", in_tree, labelled=False)
    hold = rig.hosts[busy]
    hold.add_process(4242, "ollama")
    hold.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    hold.write("sys/module/xe/refcnt", "1\n")
    rig.create_driver(OLD, TWO_AT_ONCE)
    rig.start_coordinator()
    for node in (busy, idle):
        rig.start_agent(node)
    rig.wait_phases({idle: "Done", busy: "Blocked"}, timeout=90)
    wait_named_in_status(rig, busy, "pid 4242 (ollama)")
    # KMM was never asked to load on the busy node: no loader removed its in-tree xe.
    assert names.TARGET_LABEL not in rig.node(busy)["metadata"]["labels"]
    assert rig.kmm.spec_entry(rig.module, busy) is None
    assert module_version(rig, idle) == OLD
    assert_no_unload_while_busy(rig)


def test_an_fd_opened_after_the_last_pushed_report_is_seen_at_decision_time(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = [rig.add_node(short, old_root) for short in ("a", "b")]
    rig.create_driver(OLD, TWO_AT_ONCE)
    # Agents rescan rarely and watch no uevents: nothing is pushed after the fd opens.
    rig.start_coordinator("--rescan-interval=300")
    for node in nodes:
        rig.start_agent(node)
    rig.wait_phases(dict.fromkeys(nodes, "Done"))
    busy, idle = nodes
    busy_with_ollama(rig, busy)
    rig.set_version("v7.1.4.6_260728.7")
    rig.wait_phases({idle: "Done", busy: "Blocked"}, timeout=90)
    wait_named_in_status(rig, busy, "pid 4242 (ollama)")
    assert_no_unload_while_busy(rig)


@EACH_KMM
def test_a_busy_node_labelled_at_the_target_by_someone_else_is_checked_not_loaded(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    [idle] = start(rig, ["a"], TWO_AT_ONCE)
    # A new node running an older xe that KMM did not load, in use; someone sets KMM's version
    # label on it by hand before the rollout reaches it.
    busy = rig.add_node("b", old_root, labelled=False)
    busy_with_ollama(rig, busy)
    rig.label_node(busy, {rig.labels.version: rig.target()})
    rig.start_agent(busy)
    rig.wait_phases({idle: "Done", busy: "Blocked"}, timeout=90)
    wait_named_in_status(rig, busy, "pid 4242 (ollama)")
    # The Module selects gpuctl's target label, which the rollout never wrote on the busy node.
    assert names.TARGET_LABEL not in rig.node(busy)["metadata"]["labels"]
    assert rig.kmm.spec_entry(rig.module, busy) is None
    assert module_version(rig, busy) == OLD
    assert_no_unload_while_busy(rig)


@EACH_KMM
def test_a_kmm_write_taken_off_mid_load_is_written_again_only_after_the_checks(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    rig.kmm.hold_node(node)  # KMM's workers on the node wait, as for a slow image pull
    rig.set_version(NEW)
    rig.wait_phases({node: "Loading"}, timeout=90)
    # A host daemon opens the device while KMM's worker is held back, and someone takes
    # gpuctl's target label off the node.
    busy_with_ollama(rig, node)
    rig.label_node(node, {names.TARGET_LABEL: None})
    # Writing it back is a new KMM action (a reload of a busy node): checks first.
    rig.wait_phases({node: "Blocked"}, timeout=60)
    wait_named_in_status(rig, node, "pid 4242 (ollama)")
    assert names.TARGET_LABEL not in rig.node(node)["metadata"]["labels"]
    # Idle again, KMM's held worker may run; the rollout writes the label again after its
    # checks, and the node ends at the target.
    idle_again(rig, node)
    rig.kmm.hold_node(node, held=False)
    rig.wait_phases({node: "Done"}, timeout=120)
    assert module_version(rig, node) == NEW
    assert_no_unload_while_busy(rig)


@EACH_KMM
def test_a_device_opened_after_the_check_holds_kmms_worker_off_the_node(
    rollout_rig: RolloutRig,
) -> None:
    """The gap between the check and KMM's worker (item 8): the node is checked idle and
    labelled; KMM makes its unloader, held back as by a slow image pull; then a host daemon
    opens the device. Left alone, the unloader would retry `modprobe -r` until the daemon's
    first idle moment (and KMM makes it again if it is only deleted). The rollout's next agent
    answer holds KMM's worker off the node: Blocked naming the daemon, the node in the hold
    ConfigMap, the held unloader deleted before it ran, and KMM's new one refused by the
    chart's worker hold guard even once the image pull would be over. Idle again, the node
    goes to the target through the checks, the hold let go just before its KMM write."""
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    with installed_worker_hold_guard(rig.kube, rig.namespace):
        rig.kmm.hold_node(node)  # KMM's workers on the node wait, as for a slow image pull
        rig.set_version(NEW)
        rig.wait_phases({node: "Loading"}, timeout=90)
        wait_until(
            "KMM's unloader made for the node",
            lambda: rig.worker_pods("Unload", node),
            timeout_seconds=60,
        )
        busy_with_ollama(rig, node)
        rig.wait_phases({node: "Blocked"}, timeout=60)
        wait_named_in_status(rig, node, "opened after the check")
        wait_named_in_status(rig, node, "pid 4242 (ollama)")
        wait_held(rig.kube, rig.namespace, {node})
        wait_until(
            "the held unloader deleted", lambda: not rig.worker_pods(node=node), timeout_seconds=60
        )
        refused = refused_worker_pod(rig.kube, rig.namespace, node)
        assert refused is not None
        assert worker_hold_guard.refusal_message(node) in refused.message
        rig.kmm.hold_node(node, held=False)  # the image pull would be over: still nothing runs
        assert node not in rig.kernels.unloads
        idle_again(rig, node)
        rig.wait_phases({node: "Done"}, timeout=120)
        wait_held(rig.kube, rig.namespace, set())
        assert module_version(rig, node) == NEW
        assert_no_unload_while_busy(rig)


def module_tolerations_now(rig: RolloutRig) -> list[dict[str, Any]]:
    module = rig.kube.request(
        "GET",
        f"/apis/{names.KMM_GROUP}/{names.KMM_VERSION}/namespaces/{rig.namespace}/"
        f"{names.KMM_MODULE_PLURAL}/{rig.module}",
    )
    return list(module["spec"].get("tolerations") or [])


def taint_node(rig: RolloutRig, node: str, taint: dict[str, str]) -> None:
    rig.kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"spec": {"taints": [taint]}},
        content_type="application/merge-patch+json",
    )


@EACH_KMM
def test_narrowed_tolerations_and_a_new_taint_unload_only_through_the_checks(
    rollout_rig: RolloutRig,
) -> None:
    """KMM drops a node with a taint its Module leaves untolerated and unloads it at once,
    busy or not (nmc_reconciler.go IsNodeSchedulable): `tolerateAllTaints: false` narrows
    gpuctl's wanted nodes, never the Module's tolerations. A busy node whose taint the
    narrowing leaves untolerated, and later a busy node an admin taints (the world run's seed
    6), are each held until idle, then unloaded through the checks."""
    rig = rollout_rig
    tainted, later = start(rig, ["a", "b"], TWO_AT_ONCE)
    maintenance = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
    taint_node(rig, tainted, maintenance)
    busy_with_ollama(rig, tainted)
    rig.patch_driver({"spec": {"tolerateAllTaints": False}})
    rig.wait_phases({tainted: "Blocked"}, timeout=60, version=names.REMOVAL_VERSION)
    wait_named_in_status(rig, tainted, "pid 4242 (ollama)")
    assert {"operator": "Exists"} in module_tolerations_now(rig)
    assert tainted not in rig.kernels.unloads
    idle_again(rig, tainted)
    rig.wait_phases({tainted: ""}, timeout=90, version=names.REMOVAL_VERSION)
    assert rig.phase(later) == "Done"
    busy_with_ollama(rig, later)
    taint_node(rig, later, {**maintenance, "key": "example.com/repair"})
    rig.wait_phases({later: "Blocked"}, timeout=60, version=names.REMOVAL_VERSION)
    wait_named_in_status(rig, later, "pid 4242 (ollama)")
    assert later not in rig.kernels.unloads
    idle_again(rig, later)
    rig.wait_phases({later: ""}, timeout=90, version=names.REMOVAL_VERSION)
    assert {"operator": "Exists"} in module_tolerations_now(rig)
    assert_no_unload_while_busy(rig)


NFD_GPU = "intel.feature.node.kubernetes.io/gpu-pci"


def test_an_nfd_label_flapping_on_a_busy_node_unloads_nothing(rollout_rig: RolloutRig) -> None:
    rig = rollout_rig
    busy, idle = start(rig, ["a", "b"], TWO_AT_ONCE)
    for node in (busy, idle):
        rig.label_node(node, {NFD_GPU: "true"})
    target = rig.target()
    rig.patch_driver({"spec": {"useNFDLabeling": True}})
    assert rig.target() == target  # the selector is not in a node's config: no reload
    busy_with_ollama(rig, busy)
    # NFD drops the label for a moment (a rescan, a restart): the node leaves the selector.
    rig.label_node(busy, {NFD_GPU: None})
    rig.wait_phases({busy: "Blocked"}, timeout=60, version=names.REMOVAL_VERSION)
    wait_named_in_status(rig, busy, "pid 4242 (ollama)")
    rig.label_node(busy, {NFD_GPU: "true"})
    # Back in the selector and still loaded at the target: Done again, never unloaded.
    rig.wait_phases({busy: "Done", idle: "Done"}, timeout=60, version=target)
    assert busy not in rig.kernels.unloads
    assert module_version(rig, busy) == OLD
    assert_no_unload_while_busy(rig)


def test_a_parameter_change_on_an_unversioned_gpudriver_reloads_and_verifies_the_same_build(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = [rig.add_node(short, old_root, labelled=False) for short in ("a", "b")]
    rig.create_driver(None, TWO_AT_ONCE)
    rig.start_coordinator()
    for node in nodes:
        rig.start_agent(node)
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=90)
    loads_before = len(rig.kernels.loads)
    before = rig.target()
    rig.patch_driver({"spec": {"kernelModule": CONFIG_CHANGES["parameters"]}})
    assert rig.target() != before
    # The same image reloads the same build (same srcversion): verified by the image record.
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=90)
    assert len(rig.kernels.loads) - loads_before == 2
    for node in nodes:
        assert rig.annotation(node, names.REASON).startswith("verified: xe live with srcversion")
    assert_no_unload_while_busy(rig)
