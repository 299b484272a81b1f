"""The soak end to end: `gpuctl-coordinator` (a real process), real agents reading the fake
host roots (the kernel's taint mask included), the real API server and real KMM. A
node whose kernel logs a warning during the soak after its load fails the soak and, with
onNodeFailure: Rollback, is taken back to the previous revision; the next node never starts.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common import names
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, start, wait_pending, wait_status

pytestmark = pytest.mark.integration

TAINT_WARN = 1 << 9


def test_a_node_degrading_in_the_soak_fails_it_and_is_rolled_back(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    rollout: dict[str, Any] = {**FAST, "soakSeconds": 60, "onNodeFailure": "Rollback"}
    first, second = start(rig, ["a", "b"], rollout)
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    loads_before = len(rig.kernels.loads)
    rig.set_version(NEW)
    rig.wait_phases({first: "Done"}, timeout=120, version=new)
    wait_pending(rig, (second,), new, was=old)
    assert names.SOAK_BASELINE in rig.node(first)["metadata"]["annotations"]
    wait_status(
        rig,
        "says the first node soaks",
        lambda s: (
            s.get("targetVersion") == new
            and s.get("message", "").startswith(f"soaking before the next node starts: {first}")
        ),
    )
    # The new driver misbehaves: the kernel logs a warning (taint flag W).
    host = rig.hosts[first]
    tainted = int(host.real("proc/sys/kernel/tainted").read_text())
    host.write("proc/sys/kernel/tainted", f"{tainted | TAINT_WARN}\n")
    status = wait_status(
        rig,
        f"paused at {old} after the rollback",
        lambda s: s.get("targetVersion") == old and s.get("state") == "Paused",
        timeout=180,  # the node's whole pass back to OLD, on a loaded machine
    )
    assert f"{first}: soak: new kernel taint flag(s): W (bit 9)" in status["message"]
    rig.wait_phases({first: "Done", second: "Done"}, timeout=120, version=old)
    assert module_version(rig, first) == OLD
    assert not rig.node(first)["spec"].get("unschedulable")
    # The second node was never touched: the soak held it, then the rollback.
    assert rig.kernels.loads[loads_before:] == [(first, new), (first, old)]
    assert module_version(rig, second) == OLD
    # ... nor soaked: verified in place at OLD, it has nothing to watch (and its soak would
    # have held the rollback of the first for soakSeconds).
    assert names.SOAK_BASELINE not in rig.node(second)["metadata"]["annotations"]
    assert rig.kernels.violations == []
