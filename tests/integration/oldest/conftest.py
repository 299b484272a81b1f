"""The oldest Kubernetes release gpuctl supports (the chart's kubeVersion floor): one control
plane of that release for the package (hack/kube/ensure oldest builds it), in place of the
session's.

Most tests here are ones the suite also runs on the newest release, collected again so they
run on this control plane (the chart installed and its guards enforced, one rollout with a busy
node on KMM's real operator); a module imports the tests it reruns, and this conftest brings the
fixtures they need from where they live. The others are this release's own: the server is the
chart's floor, the agent's recursiveReadOnly mounts are kept, and DRA's ResourceClaims are read
in the version 1.31 serves (v1alpha3).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.harness.access import KubeCluster
from testbed.harness.binaries import OLDEST
from testbed.harness.control_plane import ControlPlane
from tests.integration.chart.conftest import release  # noqa: F401  (the chart tests' release)
from tests.support.own_cluster import own_cluster


@pytest.fixture(scope="package")
def oldest_plane() -> Iterator[tuple[ControlPlane, KubeCluster]]:
    with own_cluster("gpuctl-test-oldest-", OLDEST) as plane:
        yield plane


@pytest.fixture(scope="package")
def kube_cluster(oldest_plane: tuple[ControlPlane, KubeCluster]) -> KubeCluster:
    """Overrides the session's cluster for every test of the package."""
    return oldest_plane[1]
