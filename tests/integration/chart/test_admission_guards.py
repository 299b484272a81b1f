"""The chart's admission guards, installed with real `helm install`: what it renders is
coordinator/policies/module_guard.py's and coordinator/policies/nmc_guard.py's guards (the ones the
other integration tests prove), the API server type-checks them clean and enforces them, and `helm
uninstall` keeps them until the admin removes them (docs/uninstall.md).

- Module guard: a cluster admin's DELETE of a gpuctl Module is refused, the chart's
  coordinator ServiceAccount's is not.
- KMM CRD guard: a cluster admin's DELETE of KMM's Module CRD is refused while the release
  namespace has a gpuctl Module (a dry run: the CRD is the whole test cluster's).
- NodeModulesConfig guard: a cluster admin's DELETE of a NodeModulesConfig whose status lists a
  Module of the release namespace is refused, the garbage collector's (the Node was deleted)
  is not, and one with nothing of the namespace loaded is not guarded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError
from coordinator.policies import kmm_crd_guard, module_guard, nmc_guard
from coordinator.policies.admission_policy import KEEP_ON_UNINSTALL, service_account_username
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import desired_module
from testbed.cluster_api import Api, gpudriver, simple_spec
from testbed.harness.access import KubeCluster
from testbed.harness.admission_policies import type_checked
from testbed.harness.waiting import wait_until
from tests.support.chart_release import Release, chart_release
from tests.support.kmm_crd_guard import refused_crd_delete
from tests.support.module_guard import module_path, refused_delete
from tests.support.nmc_guard import nmc_path, refused_nmc_delete

pytestmark = pytest.mark.integration


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, {}) as installed:
        yield installed


def rendered_guard(release: Release, name: str) -> list[dict[str, Any]]:
    """The chart's objects called `name`, without the chart's labels."""
    rendered = [o for o in release.manifest() if o["metadata"]["name"] == name]
    for obj in rendered:
        obj["metadata"].pop("labels")
    return rendered


def node_config(node: str, loaded_namespace: str | None) -> dict[str, Any]:
    """A NodeModulesConfig for `node`, with a Module of `loaded_namespace` in its status."""
    modules = []
    if loaded_namespace is not None:
        modules.append(
            {
                "name": "gpu",
                "namespace": loaded_namespace,
                "serviceAccountName": "default",
                "config": {
                    "containerImage": "registry.example/xe:1",
                    "insecurePull": False,
                    "kernelVersion": "6.8.0-60-generic",
                    "modprobe": {"moduleName": "xe"},
                },
            }
        )
    return {"metadata": {"name": node}, "status": {"modules": modules}}


def create_node_config(kube: Kube, node: str, loaded_namespace: str | None) -> None:
    body = node_config(node, loaded_namespace)
    created = kube.request(
        "POST",
        nmc_path(node).rsplit("/", 1)[0],
        body={"apiVersion": "kmm.sigs.x-k8s.io/v1beta1", "kind": "NodeModulesConfig", **body},
    )
    created["status"] = body["status"]
    kube.request("PUT", nmc_path(node) + "/status", body=created)


def allow_delete(kube: Kube, node: str, reason: str | None) -> None:
    kube.request(
        "PATCH",
        nmc_path(node),
        body={"metadata": {"annotations": {names.ALLOW_DELETE_ANNOTATION: reason}}},
        content_type=MERGE_PATCH,
    )


def delete_node_config(kube: Kube, node: str) -> None:
    """Cleanup, through the guard's way out if a guard is still there."""
    try:
        allow_delete(kube, node, "test cleanup")
        kube.request("DELETE", nmc_path(node))
    except KubeError as err:
        if not err.not_found:
            raise


def assert_type_checked(kube: Kube, name: str) -> None:
    checked = wait_until(
        f"the chart's {name} type-checked", lambda: type_checked(kube, name), timeout_seconds=60
    )
    assert not checked.get("typeChecking", {}).get("expressionWarnings"), checked


def test_the_chart_installs_both_guards_enforces_them_and_keeps_them_on_uninstall(
    kube_cluster: KubeCluster, release: Release, api: Api, namespace: str
) -> None:
    release.install()
    coordinator = f"{release.fullname}-coordinator"
    module_objects = rendered_guard(release, release.module_guard)
    nmc_objects = rendered_guard(release, release.nmc_guard)
    crd_objects = rendered_guard(release, release.crd_guard)
    assert module_objects == module_guard.guard_objects(
        release.module_guard,
        namespace,
        service_account_username(namespace, coordinator),
        annotations=dict(KEEP_ON_UNINSTALL),
    )
    assert nmc_objects == nmc_guard.guard_objects(
        release.nmc_guard, namespace, annotations=dict(KEEP_ON_UNINSTALL)
    )
    assert crd_objects == kmm_crd_guard.guard_objects(
        release.crd_guard, namespace, annotations=dict(KEEP_ON_UNINSTALL)
    )
    for name in (release.module_guard, release.nmc_guard, release.crd_guard):
        assert_type_checked(api.kube, name)

    driver = api.create_driver(gpudriver(f"{namespace}-chart", namespace, simple_spec(namespace)))
    module = desired_module(driver, namespace)
    assert module is not None
    api.kube.request("POST", module_path(namespace), body=module)
    name = module["metadata"]["name"]
    loaded, unrelated = f"{namespace}-loaded", f"{namespace}-unrelated"
    create_node_config(api.kube, loaded, namespace)
    create_node_config(api.kube, unrelated, "someone-else")
    try:
        with kube_cluster.user_client("alice", ("system:masters",)) as client:
            alice = Kube(client)
            wait_until(
                "the chart's guard refuses a cluster admin's delete of a Module",
                lambda: refused_delete(alice, namespace, name, dry_run=True),
                timeout_seconds=60,
            )
            refusal = wait_until(
                "the chart's guard refuses a cluster admin's delete of a NodeModulesConfig",
                lambda: refused_nmc_delete(alice, loaded, dry_run=True),
                timeout_seconds=60,
            )
            assert nmc_guard.refusal_message(loaded, namespace) in refusal.message
            crd = kmm_crd_guard.GUARDED_CRDS[0]
            refusal = wait_until(
                "the chart's guard refuses a cluster admin's delete of KMM's Module CRD",
                lambda: refused_crd_delete(alice, crd),
                timeout_seconds=60,
            )
            assert kmm_crd_guard.refusal_message(crd, namespace, name) in refusal.message
            assert refused_nmc_delete(alice, unrelated, dry_run=True) is None
            allow_delete(alice, loaded, "")  # an empty reason is no reason
            assert refused_nmc_delete(alice, loaded, dry_run=True) is not None
            allow_delete(alice, loaded, "node retired, driver removed by hand")
            assert refused_nmc_delete(alice, loaded, dry_run=True) is None
            allow_delete(alice, loaded, None)
        with kube_cluster.service_account_client(namespace, coordinator) as client:
            assert refused_delete(Kube(client), namespace, name, dry_run=True) is None
        gc_account = nmc_guard.GARBAGE_COLLECTOR_USERNAMES[0].rsplit(":", 2)[-2:]
        with kube_cluster.service_account_client(*gc_account) as client:
            assert refused_nmc_delete(Kube(client), loaded, dry_run=True) is None

        release.uninstall()
        for obj in module_objects + nmc_objects + crd_objects:
            assert release.get(obj) is not None, f"helm uninstall removed {obj['kind']}"
        release.remove_guards()
        gone = module_objects + nmc_objects + crd_objects
        wait_until("the guards removed", lambda: all(release.get(obj) is None for obj in gone))
        # The API server drops the policies from its cache soon after: then both can go.
        wait_until(
            "the Module deleted once the guard is gone",
            lambda: refused_delete(api.kube, namespace, name) is None,
            timeout_seconds=60,
        )
        wait_until(
            "the NodeModulesConfig deleted once the guard is gone",
            lambda: refused_nmc_delete(api.kube, loaded) is None,
            timeout_seconds=60,
        )
    finally:
        for node in (loaded, unrelated):
            delete_node_config(api.kube, node)
