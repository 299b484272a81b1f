"""The cluster autoscaler and a node mid-step, on KMM's own operator: the node carries the
autoscaler's `scale-down-disabled` annotation for its step (gpuctl/rollout/step/autoscaler.py),
taken off when it is Done; and a node deleted mid-step anyway (an autoscaler that ignores it,
a cloud instance gone) leaves no hold, no maxUnavailable slot and no failure behind: the next
node starts and the rollout completes without it."""

from __future__ import annotations

import pytest

from gpuctl.common import names
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, start

pytestmark = pytest.mark.integration


def annotations_of(rig: RolloutRig, node: str) -> dict[str, str]:
    return dict(rig.node(node)["metadata"].get("annotations") or {})


def test_a_node_mid_step_keeps_the_autoscaler_off_and_one_deleted_leaves_nothing_behind(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    first, second = start(rig, ["a", "b"], FAST)  # maxUnavailable 1: one node at a time
    rig.kmm.hold_node(first)  # KMM's worker there does not start: the node stays mid-step
    before = rig.target()
    rig.set_version(NEW)
    target = rig.target()
    wait_until(
        f"{first} Loading {target}, the autoscaler kept off it",
        lambda: (
            rig.state(first) == f"Loading {target}"
            and annotations_of(rig, first).get(names.SCALE_DOWN_DISABLED) == "true"
        ),
        timeout_seconds=60,
    )
    assert annotations_of(rig, first)[names.SCALE_DOWN_DISABLED_BY_GPUCTL] == "true"
    assert rig.state(second) == f"Done {before}"  # the one slot is the first node's
    assert names.SCALE_DOWN_DISABLED not in annotations_of(rig, second)
    # The node goes anyway (`kubectl delete node`, as the autoscaler's scale-down does).
    rig.kube.request("DELETE", f"/api/v1/nodes/{first}")
    rig.wait_phases({second: "Done"}, timeout=120)
    assert module_version(rig, second) == NEW
    assert names.SCALE_DOWN_DISABLED not in annotations_of(rig, second)  # taken off when Done
    # The status follows the Done write: complete at the target, of the one node left.
    wait_until(
        f"the rollout Complete at {target} with 1 node",
        lambda: (
            (status := rig.rollout_status()).get("state") == "Complete"
            and status.get("targetVersion") == target
            and status.get("total") == 1
        ),
        timeout_seconds=60,
    )
    assert rig.rollout_status()["counts"]["Failed"] == 0
