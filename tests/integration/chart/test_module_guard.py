"""The chart's Module delete guard, installed with real `helm install`: what it renders is
coordinator/module_guard.py's guard (the one the other integration tests prove), the API server
type-checks it clean and enforces it (a cluster admin's DELETE of a gpuctl Module is refused,
the chart's coordinator ServiceAccount's is not), and `helm uninstall` keeps it until the
admin removes it (docs/uninstall.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.drivers.module_spec import desired_module
from coordinator.kube.client import Kube
from coordinator.module_guard import HELM_KEEP, guard_objects, service_account_username
from tests.harness.access import KubeCluster
from tests.harness.waiting import wait_until
from tests.support.chart_release import Release, chart_release
from tests.support.cluster_api import Api, gpudriver, simple_spec
from tests.support.module_guard import module_path, refused_delete, type_checked

pytestmark = pytest.mark.integration

GUARD_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, {}) as installed:
        yield installed


def test_the_chart_installs_the_guard_enforces_it_and_keeps_it_on_uninstall(
    kube_cluster: KubeCluster, release: Release, api: Api, namespace: str
) -> None:
    release.install()
    coordinator = f"{release.fullname}-coordinator"
    rendered = [o for o in release.manifest() if o["kind"] in GUARD_KINDS]
    for obj in rendered:
        obj["metadata"].pop("labels")
    assert rendered == guard_objects(
        release.module_guard,
        namespace,
        service_account_username(namespace, coordinator),
        annotations=dict(HELM_KEEP),
    )
    checked = wait_until(
        "the chart's guard type-checked",
        lambda: type_checked(api.kube, release.module_guard),
        timeout_seconds=60,
    )
    assert not checked.get("typeChecking", {}).get("expressionWarnings"), checked

    driver = api.create_driver(gpudriver(f"{namespace}-chart", namespace, simple_spec(namespace)))
    module = desired_module(driver, namespace)
    assert module is not None
    api.kube.request("POST", module_path(namespace), body=module)
    name = module["metadata"]["name"]
    with kube_cluster.user_client("alice", ("system:masters",)) as alice:
        wait_until(
            "the chart's guard refuses a cluster admin's delete",
            lambda: refused_delete(Kube(alice), namespace, name, dry_run=True),
            timeout_seconds=60,
        )
    with kube_cluster.service_account_client(namespace, coordinator) as client:
        assert refused_delete(Kube(client), namespace, name, dry_run=True) is None

    release.uninstall()
    for obj in rendered:
        assert release.get(obj) is not None, f"helm uninstall removed {obj['kind']}"
    release.remove_module_guard()
    wait_until("the guard removed", lambda: all(release.get(obj) is None for obj in rendered))
    # The API server drops the policy from its cache soon after: then the Module can go.
    wait_until(
        "the Module deleted once the guard is gone",
        lambda: refused_delete(api.kube, namespace, name) is None,
        timeout_seconds=60,
    )
