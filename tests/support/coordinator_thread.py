"""The coordinator in a thread of the test process, against the test cluster's API server.

Integration tests run it this way rather than as a process when they need its objects (the
elector, a LiveNodes it leads): leader-elected with short timings, managing only the
test's GPUDrivers (`driver_selector` on TEST_LABEL), stopped and its Lease released on exit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from coordinator.kube.client import Kube
from coordinator.kube.discovery import Discover
from coordinator.manager import Coordinator, CoordinatorConfig, LeaderScoped
from testbed.cluster_api import TEST_LABEL
from testbed.harness.access import KubeCluster


@contextlib.contextmanager
def running_coordinator(
    cluster: KubeCluster,
    namespace: str,
    *,
    identity: str = "coordinator-a",
    discover: Discover | None = None,
    client: Any = None,
    kube: Kube | None = None,
    leader_scoped: Sequence[LeaderScoped] = (),
) -> Iterator[Coordinator]:
    """A coordinator for `namespace` in a thread, leader-elected, stopped on exit.

    It acts as the cluster admin unless `client` (an ApiClient, e.g. a ServiceAccount's) is
    given; `client` is closed on exit. `kube` is a Kube on that client to share (a LiveNodes'
    own, so that the coordinator closing it on stop ends the LiveNodes' watch too).
    """
    client = client if client is not None else cluster.admin_client()
    config = CoordinatorConfig(
        namespace=namespace,
        identity=identity,
        lease_duration=3.0,
        renew_deadline=2.0,
        retry_period=0.3,
        discovery_interval=0.3,
        driver_selector=f"{TEST_LABEL}={namespace}",
    )
    coordinator = Coordinator(
        kube if kube is not None else Kube(client),
        config,
        discover=discover,
        leader_scoped=leader_scoped,
    )
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, args=(stop,), name=f"test-{identity}")
    thread.start()
    try:
        yield coordinator
    finally:
        stop.set()
        thread.join(timeout=15)
        client.close()
        assert not thread.is_alive(), "coordinator did not stop within 15 s"
