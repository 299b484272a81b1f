"""A coordinator serving one node pool (`--node-selector`) rolls that pool and nothing else.

The real `gpuctl-coordinator` process, real agents over gRPC and TLS, real KMM: the
GPUDriver selects three nodes, two of them in the coordinator's pool. The two roll to NEW; the
third, left at OLD as a rollout before left it, is another shard's: no phase, no label write,
no unload, and its agent is refused with the reason.
"""

from __future__ import annotations

import pytest

from coordinator.policies import pool_guard
from gpuctl.common import names
from testbed.cluster_api import TEST_LABEL
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import DRIVER, RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    gpu_pod,
    module_version,
    old_root,
    wait_status,
)
from tests.support.pool_guard import installed_pool_guard, refused_move

pytestmark = pytest.mark.integration
POOL = "gpuctl.dev/pool"


def test_a_shard_rolls_its_pool_and_leaves_another_pools_node_alone(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    ours = [rig.add_node(short, old_root) for short in ("p1", "p2")]
    theirs = rig.add_node("q1", old_root)
    for node in ours:
        rig.label_node(node, {POOL: rig.namespace})
    rig.label_node(theirs, {POOL: f"{rig.namespace}-other"})
    rig.create_driver(OLD, FAST)
    rig.start_coordinator(f"--node-selector={POOL}={rig.namespace}")
    for node in (*ours, theirs):
        rig.start_agent(node)
    rig.wait_phases(dict.fromkeys(ours, "Done"))
    rig.wait_kmm_loaded([*ours, theirs])  # KMM's first load of each, before this test's part
    # ... and over: KMM deletes a worker Pod once it has recorded its end, so none left means
    # no first loader still running its `modprobe -r` of the in-tree xe after begin().
    wait_until(
        "KMM's first worker Pods gone",
        lambda: not any(rig.worker_pods(node=node) for node in (*ours, theirs)),
        timeout_seconds=60,
    )
    rig.kernels.begin()

    rig.set_version(NEW)
    rig.wait_phases(dict.fromkeys(ours, "Done"), timeout=90)
    target = rig.kmm_version_at(NEW)
    status = wait_status(
        rig,
        f"says Complete at {target}",
        lambda s: s.get("state") == "Complete" and s.get("targetVersion") == target,
    )
    assert (status["updated"], status["total"]) == (2, 2)
    for node in ours:
        assert module_version(rig, node) == NEW
    assert module_version(rig, theirs) == OLD
    assert rig.state(theirs) == " "  # never in this coordinator's rollout
    assert rig.node(theirs)["metadata"]["labels"][rig.labels.version] == rig.kmm_version_at(OLD)
    assert theirs not in rig.kernels.unloads
    assert rig.kernels.violations == []
    log = (rig.folder / "coordinator.log").read_text(errors="replace")
    assert f"node {theirs} does not match this coordinator's --node-selector" in log


def test_a_node_does_not_leave_its_pool_while_the_shard_has_a_stake_in_it(
    rollout_rig: RolloutRig,
) -> None:
    """Item 12 of the issue "Twelve ways a busy node can still lose its driver", for shards:
    moved out of its pool mid-step, a node stayed cordoned and prepared (its release no longer
    sees it, the other pool's refuses another GPUDriver's node); moved while loaded, nobody
    could unload it through its checks, and deleting its GPUDriver waited for ever. The chart's
    pool move guard (coordinator/policies/pool_guard.py) refuses both moves, naming the way: out of
    the GPUDriver first (unloaded after its checks), then relabelled."""
    rig = rollout_rig
    pool = {POOL: rig.namespace}
    away: dict[str, str | None] = {POOL: f"{rig.namespace}-other"}
    (node,) = [rig.add_node("p1", old_root)]
    rig.label_node(node, {POOL: rig.namespace})
    rig.create_driver(OLD, {**FAST, "timeouts": {**TIMEOUTS, "drain": "600s"}})
    rig.start_coordinator(f"--node-selector={POOL}={rig.namespace}")
    rig.start_agent(node)
    rig.wait_phases({node: "Done"})
    rig.wait_kmm_loaded([node])
    rig.kernels.begin()
    with installed_pool_guard(rig.kube, rig.namespace, pool, probe_node=node, away=away):
        loaded = refused_move(rig.kube, node, away)
        assert loaded is not None
        assert loaded.message.endswith(
            pool_guard.refusal_message(node, f"loaded by GPUDriver {DRIVER}")
        )
        # Another label, or the pool's own label kept: not a move, not refused.
        assert refused_move(rig.kube, node, {"team": "ml"}) is None
        pod = gpu_pod(rig, node)
        rig.set_version(NEW)
        rig.wait_phases({node: "Draining"})
        mid_step = refused_move(rig.kube, node, away)
        assert mid_step is not None
        assert pool_guard.refusal_message(node, "mid-step (Draining) in its rollout") in (
            mid_step.message
        )
        # The deliberate way out, in a dry run: the annotation with a reason lets it through.
        reason = {names.ALLOW_POOL_MOVE_ANNOTATION: "host retired, driver gone with it"}
        assert refused_move(rig.kube, node, away, annotations=reason, dry_run=True) is None
        # The way in the docs: out of the GPUDriver, unloaded after its checks, then moved.
        rig.label_node(node, {TEST_LABEL: f"{rig.namespace}-elsewhere"})
        rig.kube.request(
            "DELETE",
            f"/api/v1/namespaces/{rig.namespace}/pods/{pod}",
            query={"gracePeriodSeconds": "0"},
        )
        wait_until(
            f"{node} leaves the rollout, unloaded",
            lambda: (
                rig.state(node) == " "
                and names.TARGET_LABEL not in rig.node(node)["metadata"]["labels"]
            ),
            timeout_seconds=90,
        )
        assert refused_move(rig.kube, node, away) is None
    assert rig.kernels.violations == []
