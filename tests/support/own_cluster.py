"""A control plane started for one test run, module or package, and removed afterwards.

The session's shared cluster (tests/integration/conftest.py) and the suites that need one of
their own — to restart or pause its parts (chaos, the claims API going away) or to run
node-lifecycle controllers over kwok nodes — all start it here: a temporary root, every CRD
installed (testbed/harness/cluster.py), the processes stopped at exit even if the fixture's
teardown never runs, and the root removed.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from testbed.harness import shared_kmm
from testbed.harness.access import KubeCluster
from testbed.harness.binaries import NEWEST, KubeRelease
from testbed.harness.cluster import repository_root, start_cluster
from testbed.harness.control_plane import ControlPlane


@contextlib.contextmanager
def own_cluster(
    prefix: str, release: KubeRelease = NEWEST
) -> Iterator[tuple[ControlPlane, KubeCluster]]:
    """Starts a control plane of `release` under a fresh temporary folder named `prefix`...;
    yields it and its KubeCluster; stops it and removes the folder on exit."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        control_plane, cluster = start_cluster(
            root,
            repository_root(),
            os.environ,
            datetime.datetime.now(datetime.UTC),
            die_with_parent=True,
            release=release,
        )
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    atexit.register(control_plane.stop)
    try:
        yield control_plane, cluster
    finally:
        shared_kmm.forget(cluster.kubeconfig)  # KMM stops before its API server does
        cluster.close_clients()
        control_plane.stop()
        atexit.unregister(control_plane.stop)
        shutil.rmtree(root, ignore_errors=True)
