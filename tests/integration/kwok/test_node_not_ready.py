"""The rollout and a Node the node-lifecycle controller marks NotReady and unreachable.

kwok stops renewing one node's Lease (as when its kubelet dies); after the grace period the
real node-lifecycle controller sets its Ready condition Unknown and taints it
``node.kubernetes.io/unreachable`` (NoSchedule and NoExecute). Then a rollout starts:

- KMM does not unload the node: the Module tolerates every taint (docs/rollout.md), so the
  unreachable taint does not take the node out of the Module's selection.
- The rollout marks the node Blocked ("node is NotReady") and it still counts against
  ``maxUnavailable``: with a bound of 2, the other nodes go one at a time beside it.
- When kwok renews the Lease again, the controller turns the node Ready and lifts the taints;
  the rollout takes it through the same checks to the target.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common import names
from testbed.cluster_api import TEST_LABEL
from testbed.harness.waiting import wait_until
from testbed.kwok_nodes import (
    UNREACHABLE_TAINT,
    ready_status,
    resume_heartbeat,
    stop_heartbeat,
    taint_keys,
)
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.node_watch import NodeWatch, unavailable_within
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, start, wait_status

pytestmark = pytest.mark.integration


def test_an_unreachable_node_is_blocked_not_unloaded_and_rolls_once_it_is_back(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = start(rig, ["n1", "n2", "n3", "n4"], {**FAST, "maxUnavailable": 2})
    lost = nodes[1]
    stop_heartbeat(rig.kube, lost)

    def unreachable() -> dict[str, Any] | None:
        node = rig.node(lost)
        return node if UNREACHABLE_TAINT in taint_keys(node) else None

    node = wait_until("the node-lifecycle controller taints it unreachable", unreachable, 120)
    assert ready_status(node) == "Unknown"
    assert rig.labels.ready in node["metadata"]["labels"]  # KMM still has it loaded
    assert rig.kernels.unloads == []  # the taint did not make KMM unload it

    target = rig.kmm_version_at(NEW)
    node_watch = NodeWatch(
        rig.kube,
        f"{TEST_LABEL}={rig.namespace}",
        [unavailable_within(1, rig.labels.version, target)],  # NotReady aside: 2 - 1
    )
    node_watch.start()
    try:
        rig.set_version(NEW)
        others = [n for n in nodes if n != lost]
        rig.wait_phases({**dict.fromkeys(others, "Done"), lost: "Blocked"}, timeout=180)
        assert rig.annotation(lost, names.REASON) == "node is NotReady"
        assert module_version(rig, lost) == OLD
        assert lost not in rig.kernels.unloads
        assert not rig.node(lost)["spec"].get("unschedulable")  # Blocked: never cordoned
        wait_status(rig, "counts the NotReady node Blocked", lambda s: s["counts"]["Blocked"] == 1)

        resume_heartbeat(rig.kube, lost)
        wait_until(
            "the node is Ready and untainted again",
            lambda: (
                ready_status(rig.node(lost)) == "True"
                and UNREACHABLE_TAINT not in taint_keys(rig.node(lost))
            ),
            120,
        )
        rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=180)
        node_watch.wait_until_seen(nodes, "Done", target)
    finally:
        node_watch.stop()
    assert node_watch.breaches == []
    assert module_version(rig, lost) == NEW
    assert sorted(rig.kernels.unloads) == sorted(nodes)
    assert rig.kernels.violations == []
