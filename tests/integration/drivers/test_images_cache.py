"""The rollout's first pass waits for KMM's record of which images exist (its
ModuleImagesConfigs), as it waits for Nodes, claims and Modules.

A reload is held until KMM has found the new image for the node's kernel
(gpuctl/rollout/step/writes.py, image_not_ready). A pass on a record not read yet took every image
as not found: a node already Blocked for a process holding its render node had that reason
overwritten with "KMM has not found image …" by a new leader's first pass (found by a CI run
of tests/integration/chart/test_upgrade_mid_rollout.py on 2026-12-04). Here the coordinator's
ServiceAccount may not list ModuleImagesConfigs until the test grants it: until then the
leader says which cache it waits for and runs no rollout pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.health import Verdict
from coordinator.kube.client import path
from coordinator.policies.rbac import NAMESPACE_RULES
from gpuctl.common.names import KMM_IMAGES_CONFIG_PLURAL
from testbed.cluster_api import Api
from testbed.coordinator_rbac import ACCOUNT, RBAC, bound_coordinator
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration


@pytest.fixture
def coordinator_account(api: Api, namespace: str) -> Iterator[str]:
    with bound_coordinator(api.kube, namespace) as account:
        yield account


def namespace_role(rules: list[dict[str, object]]) -> dict[str, object]:
    return {"metadata": {"name": ACCOUNT}, "rules": rules}


def test_the_rollout_starts_only_once_kmms_images_record_is_read(
    kube_cluster: KubeCluster, *, namespace: str, api: Api, coordinator_account: str
) -> None:
    role = path(RBAC, "v1", "roles", namespace=namespace, name=ACCOUNT)
    without_images = [r for r in NAMESPACE_RULES if KMM_IMAGES_CONFIG_PLURAL not in r["resources"]]
    assert len(without_images) == len(NAMESPACE_RULES) - 1
    api.kube.request("PUT", role, body=namespace_role(without_images))
    token = kube_cluster.service_account_token(namespace, coordinator_account)
    with (
        kube_cluster.token_client(token) as client,
        running_coordinator(kube_cluster, namespace, client=client) as coordinator,
    ):
        waiting = Verdict(False, "leading, caches not synced yet: moduleimagesconfigs")
        wait_until(
            "the leader waits for the images record alone",
            lambda: coordinator.readiness() == waiting,
            timeout_seconds=60,
        )
        assert coordinator.rollout is None, "a rollout pass could run on an unread images record"

        api.kube.request("PUT", role, body=namespace_role(list(NAMESPACE_RULES)))
        # Readiness also asks for a recent Lease read: waited for, not read once, on a busy
        # machine.
        ready = Verdict(True, "leading, caches synced")
        wait_until(
            "the leader reads the images record, starts the rollout and is ready",
            lambda: coordinator.rollout is not None and coordinator.readiness() == ready,
            timeout_seconds=60,
        )
