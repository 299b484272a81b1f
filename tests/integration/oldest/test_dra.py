"""DRA on the oldest release: 1.31 serves ResourceClaims only as `resource.k8s.io/v1alpha3`, and
only where the admin switched DRA on (feature gate and runtime config). There, an allocated GPU
claim blocks its node like a v1 claim does on a newer release: the coordinator's discovery picks
v1alpha3 (gpuctl/common/gpu_claims.py) and reads its allocation, while the free node rolls.

The module restarts the package's API server with DRA on, and restarts it as it was at the end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuctl.common import names
from testbed.cluster_api import Api
from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, TIMEOUTS, module_version, start

pytestmark = pytest.mark.integration

DRA_ON = (
    "--feature-gates=DynamicResourceAllocation=true",
    "--runtime-config=resource.k8s.io/v1alpha3=true",
)


@pytest.fixture(scope="module", autouse=True)
def dra_switched_on(oldest_plane: tuple[ControlPlane, KubeCluster]) -> Iterator[None]:
    control_plane, _ = oldest_plane
    control_plane.restart_apiserver(*DRA_ON)
    try:
        yield
    finally:
        control_plane.restart_apiserver()


def test_a_v1alpha3_claim_blocks_its_node_until_it_is_released(
    rollout_rig: RolloutRig, api: Api
) -> None:
    rig = rollout_rig
    quick_drain = {**FAST, "timeouts": {**TIMEOUTS, "drain": "3s"}}
    claimed, free = start(rig, ["a", "b"], quick_drain)
    api.create_claim(rig.namespace, "inference", claimed, version="v1alpha3")
    rig.set_version(NEW)
    rig.wait_phases({claimed: "Blocked", free: "Done"}, timeout=60)
    reason = rig.annotation(claimed, names.REASON)
    assert f"allocated GPU ResourceClaims {rig.namespace}/inference" in reason
    assert module_version(rig, claimed) == OLD
    api.delete_claim(rig.namespace, "inference", version="v1alpha3")
    rig.wait_phases({claimed: "Done", free: "Done"}, timeout=60)
    assert module_version(rig, claimed) == NEW
    assert rig.kernels.violations == []
