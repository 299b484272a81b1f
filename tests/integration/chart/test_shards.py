"""A fleet sharded by node pool (docs/deploying.md#sharding): two releases of the chart, each
under its own name in its own namespace with its own shard.nodeSelector and
coordinator.gpudriverSelector, install side by side with real `helm install`. Neither takes an
object of the other's (helm would refuse the second install on a name both render), and each
one's coordinator and agents are scoped to its own pool. The coordinators are not run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube
from testbed.harness.access import KubeCluster
from testbed.harness.crds import install_crds
from tests.support.chart_release import (
    Release,
    another_namespace,
    chart_release,
    object_path,
    scc_crd,
)

pytestmark = pytest.mark.integration

POOL_LABEL = "gpuctl.dev/pool"
POOLS = ("a", "b")


@pytest.fixture
def shards(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[dict[str, Release]]:
    """Pool a's release in the test's namespace, pool b's in another; both uninstalled (then
    b's namespace deleted) when the test ends."""
    # OpenShift on: the SCCs are the cluster-scoped objects the chart renders only then.
    install_crds(kube_admin, [scc_crd()])
    kube = Kube(kube_admin)
    with contextlib.ExitStack() as stack:
        namespaces = {"a": namespace, "b": stack.enter_context(another_namespace(kube))}
        releases: dict[str, Release] = {}
        for pool in POOLS:
            values = {
                "shard": {"nodeSelector": {POOL_LABEL: pool}},
                "coordinator": {"gpudriverSelector": f"{POOL_LABEL}={pool}"},
                "openshift": {"enabled": True},
            }
            releases[pool] = stack.enter_context(
                chart_release(kube_cluster, kube, namespaces[pool], tmp_path / pool, values)
            )
        yield releases


def owner(stored: dict[str, Any]) -> tuple[str | None, str | None]:
    """The release helm recorded as the owner of a stored object."""
    annotations = stored["metadata"].get("annotations") or {}
    return (
        annotations.get("meta.helm.sh/release-name"),
        annotations.get("meta.helm.sh/release-namespace"),
    )


def test_one_release_per_pool_installs_side_by_side(shards: dict[str, Release]) -> None:
    notes = {pool: release.install() for pool, release in shards.items()}

    outside: dict[str, set[str]] = {}  # each release's objects outside its namespace, by path
    for pool, release in shards.items():
        assert f"only the Nodes matching {POOL_LABEL}={pool}" in notes[pool]
        manifest = release.manifest()
        for obj in manifest:
            stored = release.get(obj)
            assert stored is not None, f"{obj['kind']} {obj['metadata']['name']} missing"
            assert owner(stored) == (release.name, release.namespace), object_path(obj)
        outside[pool] = {
            object_path(o) for o in manifest if o["metadata"].get("namespace") != release.namespace
        }
        kinds = {o["kind"] for o in manifest if object_path(o) in outside[pool]}
        assert {"ClusterRole", "SecurityContextConstraints", "ValidatingAdmissionPolicy"} <= kinds
    assert not outside["a"] & outside["b"]

    # Each coordinator serves, and each DaemonSet runs on, its own pool only.
    for pool, release in shards.items():
        coordinator = release.deployment()["spec"]["template"]["spec"]["containers"][0]
        selectors = [a for a in coordinator["args"] if a.startswith("--node-selector")]
        assert selectors == [f"--node-selector={POOL_LABEL}={pool}"]
        assert f"--gpudriver-selector={POOL_LABEL}={pool}" in coordinator["args"]
        agents = release.daemonset()["spec"]["template"]["spec"]
        assert agents["nodeSelector"] == {POOL_LABEL: pool}
