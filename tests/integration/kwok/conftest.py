"""A control plane of its own whose Nodes have a real lifecycle (kwok, kube-scheduler, the
node-lifecycle, taint-eviction, disruption, ReplicaSet and Deployment controllers).

``kube_cluster`` is overridden for this package (package scope: it stops when the package's
tests end) so every shared fixture (``namespace``, ``make_node``, ``real_kmm``,
``rollout_rig``, ...) works here unchanged against it. ``node_lifecycle`` is the running
``testbed.harness.node_lifecycle.NodeLifecycle``. Every Node here is kwok's: created Ready,
renewed by kwok's Leases, taken NotReady by ``stop_heartbeat`` (testbed/kwok_nodes.py).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator

import pytest

from testbed.harness.access import KubeCluster
from testbed.harness.binaries import find_binaries
from testbed.harness.cluster import repository_root
from testbed.harness.kwok import find_kwok
from testbed.harness.node_lifecycle import NodeLifecycle, start_node_lifecycle
from tests.support.own_cluster import own_cluster


@pytest.fixture(scope="package")
def kwok_cluster() -> Iterator[tuple[KubeCluster, NodeLifecycle]]:
    repo = repository_root()
    kwok_binary = find_kwok(repo, os.environ)
    kube_folder = find_binaries(repo, os.environ).apiserver.parent
    with own_cluster("gpuctl-kwok-cluster-") as (control_plane, cluster):
        lifecycle = start_node_lifecycle(
            control_plane.layout,
            kube_folder=kube_folder,
            kwok_binary=kwok_binary,
            die_with_parent=True,
        )
        atexit.register(lifecycle.stop)
        try:
            yield cluster, lifecycle
        finally:
            lifecycle.stop()
            atexit.unregister(lifecycle.stop)


@pytest.fixture(scope="package")
def kube_cluster(kwok_cluster: tuple[KubeCluster, NodeLifecycle]) -> KubeCluster:
    return kwok_cluster[0]


@pytest.fixture(scope="package")
def node_lifecycle(kwok_cluster: tuple[KubeCluster, NodeLifecycle]) -> NodeLifecycle:
    return kwok_cluster[1]
