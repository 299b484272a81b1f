"""A control plane of its own whose Nodes have a real lifecycle (kwok, kube-scheduler, the
node-lifecycle, taint-eviction, disruption, ReplicaSet and Deployment controllers).

``kube_cluster`` is overridden for this package (package scope: it stops when the package's
tests end) so every shared fixture (``namespace``, ``make_node``, ``kmm_emulator``,
``rollout_rig``, ...) works here unchanged against it. ``node_lifecycle`` is the running
``tests.harness.node_lifecycle.NodeLifecycle``. Every Node here is kwok's: created Ready,
renewed by kwok's Leases, taken NotReady by ``stop_heartbeat`` (tests/support/kwok_nodes.py).
"""

from __future__ import annotations

import atexit
import datetime
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.access import KubeCluster
from tests.harness.binaries import find_binaries
from tests.harness.cluster import repository_root, start_cluster
from tests.harness.kwok import find_kwok
from tests.harness.node_lifecycle import NodeLifecycle, start_node_lifecycle


@pytest.fixture(scope="package")
def kwok_cluster() -> Iterator[tuple[KubeCluster, NodeLifecycle]]:
    root = Path(tempfile.mkdtemp(prefix="gpuctl-kwok-cluster-"))
    repo = repository_root()
    try:
        kwok_binary = find_kwok(repo, os.environ)
        kube_folder = find_binaries(repo, os.environ).apiserver.parent
        control_plane, cluster = start_cluster(
            root, repo, os.environ, datetime.datetime.now(datetime.UTC), die_with_parent=True
        )
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    atexit.register(control_plane.stop)
    try:
        lifecycle = start_node_lifecycle(
            control_plane.layout,
            kube_folder=kube_folder,
            kwok_binary=kwok_binary,
            die_with_parent=True,
        )
    except BaseException:
        control_plane.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    atexit.register(lifecycle.stop)
    try:
        yield cluster, lifecycle
    finally:
        cluster.close_clients()
        lifecycle.stop()
        control_plane.stop()
        atexit.unregister(lifecycle.stop)
        atexit.unregister(control_plane.stop)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="package")
def kube_cluster(kwok_cluster: tuple[KubeCluster, NodeLifecycle]) -> KubeCluster:
    return kwok_cluster[0]


@pytest.fixture(scope="package")
def node_lifecycle(kwok_cluster: tuple[KubeCluster, NodeLifecycle]) -> NodeLifecycle:
    return kwok_cluster[1]
