"""The ResourceClaims API stops answering (404) under a running rollout: nothing unloads.

Claims written while DRA was served still pin their devices when the API server stops serving
`resource.k8s.io` (here: a real kube-apiserver restarted with the group switched off, which
answers 404 for claims and drops the group from discovery). The coordinator loses its Lease
while the API server restarts and starts again (as its Deployment would) into a cluster
without DRA — so "no claims" must not follow from "not served": the pod that references the
claim counts as a GPU pod (gpuctl/common/gpu_pods.py) and its node is Blocked, named with the
pod, while the idle node converges. When the API is served again, the node whose claim is
still allocated stays Blocked, named with its claim.

This module runs its own control plane (the session's is shared and must not be reconfigured).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testbed.cluster_api import Api
from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, start
from tests.support.own_cluster import own_cluster

pytestmark = pytest.mark.integration

DRA_OFF = "--runtime-config=resource.k8s.io/v1=false"


@pytest.fixture(scope="module")
def own_plane() -> Iterator[tuple[ControlPlane, KubeCluster]]:
    with own_cluster("gpuctl-test-dra-") as plane:
        yield plane


@pytest.fixture(scope="module")
def kube_cluster(own_plane: tuple[ControlPlane, KubeCluster]) -> KubeCluster:
    """Overrides the session's cluster for every fixture of this module."""
    return own_plane[1]


def claim_user(rig: RolloutRig, node: str, claim: str) -> str:
    """A pod bound to `node` that references `claim` (no kubelet runs it: it stays Pending)."""
    rig.kube.request(
        "POST",
        f"/api/v1/namespaces/{rig.namespace}/pods",
        body={
            "metadata": {"name": "trainer"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "train", "image": "registry.example.com/train:1"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            },
        },
    )
    return f"{rig.namespace}/trainer"


def reason_of(status: dict[str, Any], node: str) -> str:
    rows = [row for row in status.get("nodes") or [] if row.get("name") == node]
    return str(rows[0].get("reason", "")) if rows else ""


def wait_reason(rig: RolloutRig, node: str, words: str) -> None:
    """Until the rollout status gives `node` a reason with `words` in it (the coordinator may
    be starting again after the API server's restart)."""
    try:
        wait_until(
            f"the rollout status names {node} with {words!r}",
            lambda: words in reason_of(rig.rollout_status() or {}, node),
            timeout_seconds=120,
        )
    except AssertionError as err:
        raise AssertionError(
            f"{err}\nstatus: {rig.rollout_status()}\nlog: {rig.coordinator_log()}"
        ) from None


def test_a_claims_api_answering_404_unloads_no_node_whose_pod_holds_a_claim(
    own_plane: tuple[ControlPlane, KubeCluster], rollout_rig: RolloutRig
) -> None:
    control_plane, cluster = own_plane
    rig = rollout_rig
    quick_drain = {**FAST, "maxUnavailable": 2, "timeouts": {**FAST["timeouts"], "drain": "3s"}}
    idle, claimed = start(rig, ["a", "b"], quick_drain)
    Api(cluster).create_claim(rig.namespace, "train-0", claimed)
    pod = claim_user(rig, claimed, "train-0")
    rig.restart_coordinator_when_it_exits()  # it exits when it cannot renew its Lease
    before = rig.target()
    rebuilt = rig.publish_rebuild(OLD)

    control_plane.restart_apiserver(DRA_OFF, health="livez")
    rig.patch_driver({"spec": {"kernelModule": rebuilt}})
    assert rig.target() != before
    rig.wait_phases({idle: "Done", claimed: "Blocked"}, timeout=120)
    wait_reason(rig, claimed, pod)
    assert claimed not in rig.kernels.unloads
    assert rig.node(claimed)["metadata"]["labels"][rig.labels.version] == before

    control_plane.restart_apiserver()
    wait_reason(rig, claimed, "train-0")
    assert rig.phase(claimed) == "Blocked"
    assert claimed not in rig.kernels.unloads
    assert rig.kmm.unloads_while_busy() == []
