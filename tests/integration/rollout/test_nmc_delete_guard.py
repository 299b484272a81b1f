"""Deleting a NodeModulesConfig on real KMM: refused where a gpuctl driver is live, so KMM never
reloads a busy node behind the rollout's back (the issue "Twelve ways a busy node can still lose
its driver", item 9).

KMM recreates a deleted NodeModulesConfig from the Module at once, without status, and its
loader's first act is `modprobe -r` of the live `xe`. With the guard
(coordinator/policies/nmc_guard.py, as the chart installs it) a cluster admin's DELETE of a busy
node's NodeModulesConfig is refused naming the node and the way out; the deliberate way out
(`gpuctl.dev/allow-delete: <reason>`) lets it through, and then KMM does reload that node — shown on
an idle one, which is why the guard exists; deleting a Node still lets the garbage collector delete
its NodeModulesConfig. The rig's oracle ends the test asserting no unload was ever attempted on the
busy node.
"""

from __future__ import annotations

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, path
from coordinator.policies.nmc_guard import refusal_message
from gpuctl.common import names
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, busy_with_ollama, start
from tests.support.kmm_matrix import EACH_KMM
from tests.support.nmc_guard import installed_nmc_guard, nmc_path, refused_nmc_delete

pytestmark = pytest.mark.integration


def nmc_uid(rig: RolloutRig, node: str) -> str | None:
    nmc = rig.kmm.nmc(node)
    return str(nmc["metadata"]["uid"]) if nmc else None


def reloaded_by_kmm(rig: RolloutRig, node: str, old_uid: str) -> bool:
    """KMM made a new NodeModulesConfig for `node` and its loader loaded the target again."""
    uid = nmc_uid(rig, node)
    loaded = rig.kmm.loaded(rig.module, node)
    return uid not in (None, old_uid) and loaded is not None and loaded.version == rig.target()


@EACH_KMM
def test_a_busy_nodes_node_modules_config_cannot_be_deleted_so_kmm_never_reloads_it(
    rollout_rig: RolloutRig, kube_cluster: KubeCluster
) -> None:
    rig = rollout_rig
    busy, idle, retired = start(rig, ["a", "b", "c"], FAST)
    busy_with_ollama(rig, busy)
    with kube_cluster.user_client("alice", ("system:masters",)) as client:
        alice = Kube(client)
        with installed_nmc_guard(rig.kube, rig.namespace, probe=alice, probe_node=busy):
            busy_uid = nmc_uid(rig, busy)
            refused = refused_nmc_delete(alice, busy)
            assert refused is not None
            assert refusal_message(busy, rig.namespace) in refused.message
            assert nmc_uid(rig, busy) == busy_uid
            assert rig.kmm.status_entry(rig.module, busy) is not None

            # The way out is deliberate, and then KMM does what the guard is there to stop:
            # it recreates the NodeModulesConfig and its loader removes the live xe.
            idle_uid = nmc_uid(rig, idle)
            assert idle_uid is not None
            assert refused_nmc_delete(alice, idle) is not None
            alice.request(
                "PATCH",
                nmc_path(idle),
                body={"metadata": {"annotations": {names.ALLOW_DELETE_ANNOTATION: "test"}}},
                content_type=MERGE_PATCH,
            )
            assert refused_nmc_delete(alice, idle) is None
            wait_until(
                f"KMM reloads {idle} under a new NodeModulesConfig",
                lambda: reloaded_by_kmm(rig, idle, idle_uid),
                timeout_seconds=120,
            )
            assert idle in rig.kernels.unloads

            # A Node deleted: the garbage collector deletes its NodeModulesConfig (owned by
            # the Node) through the guard.
            assert nmc_uid(rig, retired) is not None
            rig.kube.request("DELETE", path("", "v1", "nodes", name=retired))
            wait_until(
                f"the garbage collector deletes {retired}'s NodeModulesConfig",
                lambda: nmc_uid(rig, retired) is None,
                timeout_seconds=60,
            )
    assert busy not in rig.kernels.unloads
    assert rig.kmm.unloads_while_busy() == []
