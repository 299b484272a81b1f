"""A coordinator serving one node pool (`--node-selector`) rolls that pool and nothing else.

The real `gpuctl-coordinator` process, real agents over gRPC and TLS, real KMM: the
GPUDriver selects three nodes, two of them in the coordinator's pool. The two roll to NEW; the
third, left at OLD as a rollout before left it, is another shard's: no phase, no label write,
no unload, and its agent is refused with the reason.
"""

from __future__ import annotations

import pytest

from tests.support.rollout_live.rig import NEW, OLD, RolloutRig
from tests.support.rollout_live.scenario import FAST, module_version, old_root, wait_status

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
