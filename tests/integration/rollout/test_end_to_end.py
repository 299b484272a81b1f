"""The rollout end to end: `gpuctl-coordinator` (a real process), agents over real gRPC and
TLS on fake host roots, the real API server, and KMM's own operator whose worker changes
those roots (the nodes' kernels record any unload of a busy node: every test ends asserting
there was none, in RolloutRig.close).

Every test starts with its nodes targeted and loaded at OLD and moves the GPUDriver to NEW, or
takes nodes out of it. The rollout's versions are the Module's KMM versions (`rig.target()`);
the loaded module's backport tag is the user's version (OLD, NEW).
"""

from __future__ import annotations

import json
import random
import subprocess
import time
import urllib.request

import pytest

from gpuctl.common import names
from gpuctl.common.build_version import gpuctl_version
from testbed.cluster_api import TEST_LABEL, Api
from testbed.fakehost.scenarios import B70_PFS, B580
from testbed.harness.cordon_taint import CordonTaintMirror
from testbed.harness.waiting import wait_until
from testbed.rollout_live.fake_nodes import (
    VF_COUNT,
    enable_vfs,
    enable_vm_vfs,
    vf_node_root_before_vfs,
)
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.node_watch import NodeWatch, unavailable_within
from testbed.rollout_live.rig import BIN, RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    assert_left,
    busy_with_ollama,
    idle_again,
    module_version,
    old_root,
    start,
    wait_complete,
    wait_pending,
    wait_status,
)
from tests.support.argocd_health import argocd_health
from tests.support.kmm_matrix import EACH_KMM

pytestmark = pytest.mark.integration


def watch(rig: RolloutRig, bound: int, admin: frozenset[str] = frozenset()) -> NodeWatch:
    """A watch of the test's nodes checking the bound of the rollout to NEW."""
    node_watch = NodeWatch(
        rig.kube,
        f"{TEST_LABEL}={rig.namespace}",
        [unavailable_within(bound, rig.labels.version, rig.kmm_version_at(NEW), admin)],
    )
    node_watch.start()
    return node_watch


MODULE = "gpu-gpu"
LOADING_COUNT = 'gpuctl_rollout_step_seconds_count{phase="Loading"}'
PASSES = "gpuctl_rollout_pass_seconds_count"


def scrape(rig: RolloutRig) -> dict[str, float]:
    """The coordinator's /metrics as {sample with labels: value}."""
    url = f"http://127.0.0.1:{rig.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


@EACH_KMM
def test_five_nodes_roll_one_at_a_time_in_order_and_end_verified(
    rollout_rig: RolloutRig, cordon_taints: CordonTaintMirror
) -> None:
    rig = rollout_rig
    # As the chart passes the container's limit (the Downward API's limits.memory, in bytes).
    rig.coordinator_env["GPUCTL_MEMORY_LIMIT_BYTES"] = str(512 * 2**20)
    nodes = start(rig, ["n1", "n2", "n3", "n4", "n5"], FAST)
    node_watch = watch(rig, bound=1)
    target = rig.kmm_version_at(NEW)
    order = node_watch.first_reaching(rig.labels.version, target)
    before = scrape(rig)
    loading_before, passes_before = before.get(LOADING_COUNT, 0), before.get(PASSES, 0)
    try:
        rig.set_version(NEW)
        rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=120)
        node_watch.wait_until_seen(nodes, "Done", target)
    finally:
        node_watch.stop()
    assert node_watch.breaches == []
    assert node_watch.events > 5 * 5
    assert order == sorted(nodes)
    assert rig.kernels.violations == []
    assert sorted(rig.kernels.unloads) == sorted(nodes)  # cordoning unloaded nothing
    for node in nodes:
        assert module_version(rig, node) == NEW
        obj = rig.node(node)
        assert not obj["spec"].get("unschedulable")
        annotations = obj["metadata"]["annotations"]
        assert annotations[names.STATE_VERSION] == target
        assert obj["metadata"]["labels"][names.TARGET_LABEL] == "gpu"
        assert annotations[names.REASON].startswith(
            f"verified: xe live with backport tag xeb_{NEW}"
        )
        assert names.CORDONED_BY_GPUCTL not in annotations
        assert names.BOUND_BEFORE not in annotations
    status = wait_complete(rig)
    assert status["targetVersion"] == target
    assert (status["updated"], status["total"], status["progress"]) == (5, 5, "5/5")
    assert status["counts"]["Done"] == 5
    assert status["nodes"] == []
    # The metrics are set right after the status write of the same pass: wait for that pass's.
    complete = 'gpuctl_rollout_state{gpudriver="gpu",state="Complete"}'
    metrics = wait_until(
        "the metrics say Complete",
        lambda: m if (m := scrape(rig)).get(complete) == 1 else None,
        timeout_seconds=30,
    )
    assert metrics['gpuctl_rollout_state{gpudriver="gpu",state="Progressing"}'] == 0
    assert metrics[f'gpuctl_rollout_target_info{{gpudriver="gpu",version="{target}"}}'] == 1
    assert metrics['gpuctl_rollout_hold{gpudriver="gpu",kind="RolledBack"}'] == 0
    for node in nodes:
        assert (
            metrics[f'gpuctl_node_rollout_phase{{gpudriver="gpu",node="{node}",phase="Done"}}'] == 1
        )
        version = (
            f'gpuctl_node_driver_version_info{{gpudriver="gpu",node="{node}",version="{target}"}}'
        )
        assert metrics[version] == 1
    assert metrics["gpuctl_leader"] == 1
    assert [s for s in metrics if s.startswith('gpuctl_build_info{component="coordinator"')]
    # The process's own: what the sizing advice and GpuctlCoordinatorMemoryHigh divide.
    assert metrics["gpuctl_memory_limit_bytes"] == 512 * 2**20
    assert 20 * 2**20 < metrics["process_resident_memory_bytes"] < 512 * 2**20
    assert metrics["process_cpu_seconds_total"] > 0
    assert metrics['gpuctl_rollout_nodes{gpudriver="gpu",phase="Done"}'] == 5
    # Healthy at the target (it was Healthy at the old version before: it follows a moment
    # after the rollout's status).
    wait_until(
        f"Argo CD's health check to say Healthy: all 5 nodes run {target}",
        lambda: (
            h
            if (h := argocd_health(rig.driver())).status == "Healthy"
            and h.message == f"all 5 nodes run {target}"
            else None
        ),
        timeout_seconds=30,
    )
    # `gpuctl version`: the leader's version from its Lease, the agents' from their GPUNodes.
    shown = subprocess.run(
        [
            *(str(BIN / "gpuctl"), "version", "--namespace", rig.namespace, "-o", "json"),
            *("--kubeconfig", str(rig.cluster.kubeconfig)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    versions = json.loads(shown.stdout)
    assert versions["coordinator"]["version"] == gpuctl_version()
    assert versions["agents"][gpuctl_version()] >= 5
    assert metrics['gpuctl_rollout_nodes{gpudriver="gpu",phase="Loading"}'] == 0
    # Every node left Loading once more for NEW, and spent measurable time in it.
    assert metrics[LOADING_COUNT] - loading_before == 5
    assert metrics['gpuctl_rollout_step_seconds_sum{phase="Loading"}'] > 0
    # Each node's five steps were each taken in a pass of their own at least.
    assert metrics[PASSES] - passes_before >= 5 * 5
    assert metrics["gpuctl_rollout_pass_seconds_sum"] > 0


def test_an_open_render_fd_blocks_its_node_the_rest_proceed_and_closing_it_lets_it_finish(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    first, busy, last = start(rig, ["a", "b", "c"], FAST)
    host = rig.hosts[busy]
    host.add_process(4242, "ollama")
    host.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    host.write("sys/module/xe/refcnt", "1\n")
    rig.set_version(NEW)
    rig.wait_phases({first: "Done", busy: "Blocked", last: "Done"}, timeout=90)
    reason = rig.annotation(busy, names.REASON)
    assert "pid 4242 (ollama)" in reason
    assert not rig.node(busy)["spec"].get("unschedulable")
    assert module_version(rig, busy) == OLD
    status = wait_status(rig, "counts the blocked node", lambda s: s["counts"]["Blocked"] == 1)
    assert status["nodes"][0]["name"] == busy
    assert "pid 4242" in status["nodes"][0]["reason"]
    host.remove_process(4242)
    host.write("sys/module/xe/refcnt", "0\n")
    rig.wait_phases({first: "Done", busy: "Done", last: "Done"}, timeout=60)
    assert module_version(rig, busy) == NEW
    assert rig.kernels.violations == []


def test_idle_vfs_are_disabled_and_restored_and_vfs_handed_to_a_vm_block(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    idle = rig.add_node("idle", lambda path: vf_node_root_before_vfs(path, OLD))
    vm = rig.add_node("vm", lambda path: vf_node_root_before_vfs(path, OLD))
    rig.create_driver(OLD, {**FAST, "disableIdleVFs": True, "maxUnavailable": 2})
    rig.start_coordinator()
    agents = {node: rig.start_protocol_agent(node) for node in (idle, vm)}
    rig.wait_phases({idle: "Done", vm: "Done"})
    rig.wait_kmm_loaded([idle, vm])
    rig.kernels.begin()
    # The PF driver is up: SR-IOV is enabled, one node's VFs idle, the other's in a VM.
    for pf in B70_PFS:
        enable_vfs(rig.hosts[idle], pf, VF_COUNT)
    enable_vm_vfs(rig.hosts[vm])
    rig.set_version(NEW)
    rig.wait_phases({idle: "Done", vm: "Blocked"}, timeout=90)
    # The idle node's VFs were disabled for the unload, then restored after the load.
    assert rig.kernels.violations == []
    assert [p.allow_disable_vfs for p in agents[idle].prepares][-1:] == [True]
    restored = agents[idle].restores[-1].changes
    assert sorted((c.disabled_vfs.pci_address, c.disabled_vfs.num_vfs) for c in restored) == [
        (pf, 4) for pf in B70_PFS
    ]
    for pf in B70_PFS:
        numvfs = rig.hosts[idle].real(f"sys/bus/pci/devices/{pf}/sriov_numvfs").read_text()
        assert numvfs.strip() == "4"
    assert module_version(rig, idle) == NEW
    assert names.PREPARE_CHANGES not in rig.node(idle)["metadata"]["annotations"]
    # The VM's VFs stay: the node is blocked, naming them, and nothing was unloaded there.
    reason = rig.annotation(vm, names.REASON)
    assert "vfio-pci: handed to a VM" in reason
    assert "0000:03:00.1" in reason
    assert module_version(rig, vm) == OLD
    assert vm not in rig.kernels.unloads


def test_a_failed_load_fails_the_node_and_pauses_at_the_budget_until_retried(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    # Past the kubelet's restart back-off (tests/integration/conftest.py), so that once the
    # node is fixed KMM's crash-looping loader succeeds within the retried load.
    quick_load = {**FAST, "timeouts": {**TIMEOUTS, "load": "10s"}}
    first, broken, last = start(rig, ["a", "b", "c"], quick_load)
    rig.kernels.refuse_loads(broken)
    was = rig.target()
    rig.set_version(NEW)
    rig.wait_phases({first: "Done", broken: "Failed"}, timeout=60)
    reason = rig.annotation(broken, names.REASON)
    assert "KMM did not load" in reason
    # What KMM did, from its worker Pod: the loader's container exits (the kernel refuses).
    assert f"KMM's load Pod {rig.namespace}/kmm-worker-{broken}-" in reason, reason
    assert "exited with code 1" in reason, reason
    assert rig.node(broken)["spec"].get("unschedulable")  # kept cordoned for the admin
    # No standing order is left to KMM: the write is taken back (nothing of the driver is
    # loaded), KMM deletes its crash-looping loader, and no more `modprobe -r xe` runs there.
    assert "the KMM write was taken back" in reason, reason
    assert names.TARGET_LABEL not in rig.node(broken)["metadata"]["labels"]
    wait_until(
        f"KMM's loader on {broken} deleted",
        lambda: not rig.worker_pods(node=broken),
        timeout_seconds=60,
    )
    attempts = len(rig.kmm.load_calls(broken))
    status = wait_status(rig, "says Failed", lambda s: s.get("state") == "Failed")
    assert "(failureBudget 1)" in status["message"]
    time.sleep(2)
    # The rollout does not march on: the last node waits, Done at the old version.
    wait_pending(rig, (last,), rig.target(), was=was, kind="Held")
    assert len(rig.kmm.load_calls(broken)) == attempts
    # `gpuctl rollout retry --node NODE`: back to Pending, reason cleared.
    rig.kernels.refuse_loads(broken, None)
    rig.kube.request(
        "PATCH",
        f"/api/v1/nodes/{broken}",
        body={
            "metadata": {
                "labels": {names.STATE_LABEL: "Pending"},
                "annotations": {names.REASON: None},
            }
        },
        content_type="application/merge-patch+json",
    )
    rig.wait_phases({first: "Done", broken: "Done", last: "Done"}, timeout=60)
    assert not rig.node(broken)["spec"].get("unschedulable")
    wait_complete(rig)


def test_an_admin_cordon_stays_after_the_rollout(
    rollout_rig: RolloutRig, cordon_taints: CordonTaintMirror
) -> None:
    rig = rollout_rig
    admin, other = start(rig, ["a", "b"], {**FAST, "maxUnavailable": 2})
    rig.cordon(admin)
    rig.set_version(NEW)
    rig.wait_phases({admin: "Done", other: "Done"}, timeout=60)
    assert rig.node(admin)["spec"].get("unschedulable")
    assert not rig.node(other)["spec"].get("unschedulable")
    assert names.CORDONED_BY_GPUCTL not in rig.node(admin)["metadata"]["annotations"]
    assert module_version(rig, admin) == NEW
    assert rig.kernels.violations == []


def test_a_coordinator_killed_at_random_points_resumes_without_breaking_the_bound(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = start(rig, ["k1", "k2", "k3", "k4", "k5"], FAST)
    for node in nodes:  # loads take a while, so kills land in every step
        rig.kmm.delay_node(node, 1.0)
    node_watch = watch(rig, bound=1)
    target = rig.kmm_version_at(NEW)
    rng = random.Random(20261129)  # noqa: S311 - reproducible kill points, not secrecy
    kills = 0
    try:
        rig.set_version(NEW)
        while kills < 10 and {rig.state(n) for n in nodes} != {f"Done {target}"}:
            time.sleep(rng.uniform(1.0, 6.0))  # startup and Lease takeover take ~3 s
            rig.kill_coordinator()
            kills += 1
            rig.start_coordinator()
        rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=120)
        node_watch.wait_until_seen(nodes, "Done", target)
    finally:
        node_watch.stop()
    assert kills >= 5, "the rollout finished before the coordinator was killed enough"
    assert node_watch.breaches == []
    assert rig.kernels.violations == []
    assert sorted(rig.kernels.unloads) == sorted(nodes)  # no node went twice
    for node in nodes:
        assert module_version(rig, node) == NEW
        assert not rig.node(node)["spec"].get("unschedulable")


def test_an_unversioned_gpudriver_loads_through_the_rollout_then_a_version_rolls_in_place(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    # Nodes running an older xe that KMM did not load: not targeted yet.
    nodes = [rig.add_node(short, old_root, labelled=False) for short in ("f1", "f2", "f3")]
    rig.create_driver(None, FAST)
    rig.start_coordinator()
    for node in nodes:
        rig.start_agent(node)
    # The Module always has a version (`cfg-<digest>` without kernelModule.version): the
    # rollout targets the nodes one at a time, and KMM loads each only once targeted.
    unversioned = rig.target()
    assert unversioned.startswith("cfg-")
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=90)
    for node in nodes:
        assert rig.node(node)["metadata"]["labels"][names.TARGET_LABEL] == "gpu"
        assert rig.annotation(node, names.REASON).startswith("verified: xe live with srcversion")
    node_watch = watch(rig, bound=1)
    target = rig.kmm_version_at(NEW)
    order = node_watch.first_reaching(rig.labels.version, target)
    try:
        # Unset -> set is one more version (KMM's webhook refuses that toggle in place; the
        # Module never toggles): node by node, nothing recreated.
        rig.set_version(NEW)
        rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=90)
        node_watch.wait_until_seen(nodes, "Done", target)
    finally:
        node_watch.stop()
    assert node_watch.breaches == []
    assert order == sorted(nodes)
    assert rig.kernels.violations == []
    for node in nodes:
        assert module_version(rig, node) == NEW
        loaded = rig.kmm.loaded(MODULE, node)
        assert loaded is not None
        assert loaded.version == target
    wait_complete(rig)


def test_an_allocated_gpu_claim_blocks_its_node_until_it_is_released(
    rollout_rig: RolloutRig, api: Api
) -> None:
    rig = rollout_rig
    quick_drain = {**FAST, "timeouts": {**TIMEOUTS, "drain": "3s"}}
    claimed, free = start(rig, ["a", "b"], quick_drain)
    api.create_claim(rig.namespace, "inference", claimed)
    rig.set_version(NEW)
    rig.wait_phases({claimed: "Blocked", free: "Done"}, timeout=60)
    reason = rig.annotation(claimed, names.REASON)
    assert f"allocated GPU ResourceClaims {rig.namespace}/inference" in reason
    assert not rig.node(claimed)["spec"].get("unschedulable")  # released while blocked
    assert module_version(rig, claimed) == OLD
    api.delete_claim(rig.namespace, "inference")
    rig.wait_phases({claimed: "Done", free: "Done"}, timeout=60)
    assert module_version(rig, claimed) == NEW
    assert rig.kernels.violations == []


def test_the_rollout_holds_after_the_first_node_until_resumed_for_its_version(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    first, second = start(rig, ["a", "b"], {**FAST, "holdAfterFirstNode": True})
    target = rig.kmm_version_at(NEW)
    rig.set_version(NEW)
    # The status of the version meant: a Held left from OLD's rollout (on a loaded machine
    # its second node may finish after the first) is another version's, not this one's.
    status = wait_status(
        rig,
        f"says Held for {target}",
        lambda s: s.get("targetVersion") == target and s.get("state") == "Held",
    )
    assert status["message"].startswith(f"held after the first node of {target}")
    assert rig.state(first) == f"Done {target}"
    time.sleep(1)
    wait_pending(rig, (second,), target, was=rig.kmm_version_at(OLD), kind="Held")
    # What `gpuctl rollout resume NAME` writes: the version the status speaks of.
    rig.patch_driver(
        {
            "metadata": {"annotations": {names.RESUMED_VERSION: status["targetVersion"]}},
            "spec": {"rollout": {"paused": False}},
        }
    )
    rig.wait_phases({first: "Done", second: "Done"}, timeout=60)
    wait_complete(rig)


def test_a_holder_module_blocks_listed_in_modules_loading_order_or_not(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    host = rig.hosts[node]
    # The backport's companion module holds xe, as on a DKMS or KMM out-of-tree node.
    host.add_module("xe_compat", taint="OE")
    host.symlink("sys/module/xe/holders/xe_compat", "../../xe_compat")
    host.write("sys/module/xe/refcnt", "1\n")
    rig.set_version(NEW)
    rig.wait_phases({node: "Blocked"}, timeout=60)
    assert "xe is held by xe_compat" in rig.annotation(node, names.REASON)
    assert module_version(rig, node) == OLD
    assert node not in rig.kernels.unloads
    # Listing it does not help: KMM removes xe first and xe_compat only after it, so
    # `modprobe -r xe` would fail with EBUSY. Still blocked, and the reason says why.
    rig.patch_driver({"spec": {"kernelModule": {"modulesLoadingOrder": ["xe", "xe_compat"]}}})
    wait_until(
        "the reason explains the order",
        lambda: "KMM removes xe first" in rig.annotation(node, names.REASON),
    )
    reason = rig.annotation(node, names.REASON)
    assert "unload it first, or fix the order" in reason
    assert rig.phase(node) == "Blocked"
    assert module_version(rig, node) == OLD
    assert node not in rig.kernels.unloads
    # The admin unloads xe_compat: nothing holds xe any more, and the node goes.
    host.remove("sys/module/xe/holders/xe_compat")
    host.remove("sys/module/xe_compat")
    host.write("sys/module/xe/refcnt", "0\n")
    rig.wait_phases({node: "Done"}, timeout=60)
    assert module_version(rig, node) == NEW
    assert rig.kernels.violations == []


@EACH_KMM
def test_nodes_leaving_the_gpudriver_are_unloaded_one_at_a_time_and_a_busy_one_waits(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    kept, idle, busy = start(rig, ["kept", "idle", "busy"], FAST)
    rig.label_node(kept, {"gpuctl.test/pool": "kept"})
    busy_with_ollama(rig, busy)
    node_watch = watch(rig, bound=1)
    try:
        # Both leave the GPUDriver's selector: its Module no longer selects them only once the
        # rollout, after its checks, removes their target label.
        selector = {TEST_LABEL: rig.namespace, "gpuctl.test/pool": "kept"}
        rig.patch_driver({"spec": {"nodeSelector": selector}})
        rig.wait_phases({idle: ""}, timeout=90)
        rig.wait_phases({busy: "Blocked"}, version=names.REMOVAL_VERSION)
    finally:
        node_watch.stop()
    assert node_watch.breaches == []
    assert_left(rig, idle)
    assert "pid 4242 (ollama)" in rig.annotation(busy, names.REASON)
    assert not rig.node(busy)["spec"].get("unschedulable")  # released while blocked
    assert module_version(rig, busy) == OLD
    assert rig.node(busy)["metadata"]["labels"][names.TARGET_LABEL] == "gpu"
    assert rig.state(kept) == f"Done {rig.target()}"
    assert module_version(rig, kept) == OLD
    # The idle node has left: the status pass after its departure counts one unload, the busy
    # node's (a pass written before it may still count two).
    wait_status(
        rig,
        "counts one unload, blocked",
        lambda s: (
            s["counts"]["Blocked"] == 1
            and "unloading the driver from 1 node(s)" in s.get("message", "")
        ),
    )
    idle_again(rig, busy)
    rig.wait_phases({busy: ""}, timeout=60)
    assert_left(rig, busy)
    assert sorted(rig.kernels.unloads) == sorted([idle, busy])
    assert rig.kernels.violations == []
    wait_complete(rig)


NEXT = "v7.2.0.3_260902.1"


def test_a_version_changed_mid_rollout_strands_no_node(rollout_rig: RolloutRig) -> None:
    rig = rollout_rig
    nodes = start(rig, ["m1", "m2", "m3"], FAST)
    for node in nodes:  # KMM takes a while, so the change lands while a node is loading
        rig.kmm.delay_node(node, 2.0)
    rig.publish_everywhere(NEXT)
    new = rig.kmm_version_at(NEW)
    rig.set_version(NEW)
    wait_until(
        f"a node loading {new}",
        lambda: any(rig.state(n) in (f"Loading {new}", f"Verifying {new}") for n in nodes),
    )
    node_watch = watch(rig, bound=1)
    try:
        rig.set_version(NEXT)
        rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=150)
    finally:
        node_watch.stop()
    assert node_watch.breaches == []
    assert rig.target() == rig.kmm_version_at(NEXT)
    for node in nodes:
        assert module_version(rig, node) == NEXT
        assert not rig.node(node)["spec"].get("unschedulable")
    assert rig.kernels.violations == []
    wait_complete(rig)


@EACH_KMM
def test_deleting_the_gpudriver_unloads_node_by_node_and_waits_for_a_busy_one(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    idle, busy = start(rig, ["d1", "d2"], FAST)
    busy_with_ollama(rig, busy)
    rig.delete_driver()
    rig.wait_phases({idle: ""}, timeout=90)
    rig.wait_phases({busy: "Blocked"}, version=names.REMOVAL_VERSION)
    assert_left(rig, idle)
    assert module_version(rig, busy) == OLD
    # The GPUDriver (and its Module) stay while a node is still targeted.
    assert not rig.driver_gone()
    idle_again(rig, busy)
    rig.wait_phases({busy: ""}, timeout=60)
    assert_left(rig, busy)
    wait_until("the GPUDriver is gone", rig.driver_gone)
    assert rig.kernels.violations == []
