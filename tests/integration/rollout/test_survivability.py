"""A GPU whose firmware fails under the new driver: xe binds it in survivability mode, so every
binding looks restored, and the node must fail verification all the same, naming the GPU;
the rollout stops there. On KMM's own operator and worker, real agents over gRPC and TLS; the
fake kernel under KMM's worker probes the version into survivability mode
(testbed/harness/kubelet/kernel.py). RolloutRig.close asserts no busy node was unloaded.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common import names
from gpuctl.rollout.reasons import HoldKind
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, TIMEOUTS, module_version, start, wait_status

pytestmark = pytest.mark.integration


def test_a_gpu_in_survivability_mode_after_the_load_fails_the_node_and_stops_the_rollout(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    rollout: dict[str, Any] = {**FAST, "timeouts": {**TIMEOUTS, "verify": "600s"}}
    sick, other = start(rig, ["a", "b"], rollout)
    rig.kernels.enter_survivability(sick, NEW, "Boot")
    rig.set_version(NEW)
    new = rig.kmm_version_at(NEW)
    # It fails on the agent's word, long before the 600 s verify timeout could fail it.
    rig.wait_phases({sick: "Failed"}, timeout=180, version=new)
    reason = rig.annotation(sick, names.REASON)
    assert "in survivability mode: 0000:03:00.0 (Boot)" in reason, reason
    assert module_version(rig, sick) == NEW  # the new driver did load, and bound the GPU
    status = wait_status(
        rig,
        "the failure budget holds the rollout",
        lambda s: s.get("holdKind") == HoldKind.FAILURE_BUDGET,
    )
    assert "failed: 1 node(s) Failed at the target" in status["message"]
    [entry] = [n for n in status["nodes"] if n["name"] == sick]
    assert entry["phase"] == "Failed"
    assert "in survivability mode" in entry["reason"], status
    assert module_version(rig, other) == OLD  # the other node was never touched
    assert rig.kernels.loads == [(sick, new)]
