"""Everything a chaos run breaks, built on a control plane of its own.

`chaos_world(plane, cluster, folder)` makes a namespace, real KMM (its manager, webhook and
the kubelet of its Pods, testbed/harness/real_kmm.py) and a RolloutRig
(nodes, agents, the coordinator processes) on a `ControlPlane` the run may pause and restart,
and tears them down after. It is the pytest fixtures' wiring (tests/integration/conftest.py)
without pytest, so bench/chaos.py can use it too.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from coordinator.kube.client import Kube
from testbed.harness.access import KubeCluster
from testbed.harness.cluster import repository_root
from testbed.harness.control_plane import ControlPlane
from testbed.harness.kmm_build import find_kmm
from testbed.harness.nodes import DEFAULT_KERNEL, create_node
from testbed.harness.real_kmm import RealKmm
from testbed.harness.serving_tls import serving_tls
from testbed.harness.waiting import wait_until
from testbed.rollout_live.rig import RolloutRig


@dataclass
class ChaosWorld:
    plane: ControlPlane
    cluster: KubeCluster
    namespace: str
    rig: RolloutRig
    kmm: RealKmm
    folder: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@contextlib.contextmanager
def chaos_world(plane: ControlPlane, cluster: KubeCluster, folder: Path) -> Iterator[ChaosWorld]:
    admin = cluster.admin_client()
    core: Any = k8s.CoreV1Api(admin)
    namespace: str = core.create_namespace({"metadata": {"generateName": "chaos-"}}).metadata.name
    wait_until(
        f"namespace {namespace} has its default ServiceAccount",
        lambda: any(
            a.metadata.name == "default"
            for a in core.list_namespaced_service_account(namespace).items
        ),
    )
    nodes: list[str] = []

    def make_node(
        name: str, labels: Mapping[str, str] | None = None, kernel_version: str = DEFAULT_KERNEL
    ) -> Any:
        full_name = f"{namespace}-{name}"
        node = create_node(admin, full_name, labels or {}, _now(), kernel_version)
        nodes.append(full_name)
        return node

    kmm = RealKmm(
        find_kmm(repository_root(), os.environ),
        admin,
        cluster.kubeconfig,
        namespace,
        folder / "kmm",
    )
    kmm.start()
    rig_folder = folder / "rollout"
    rig_folder.mkdir(parents=True, exist_ok=True)
    rig = RolloutRig(
        cluster=cluster,
        namespace=namespace,
        kube=Kube(admin),
        admin=admin,
        kmm=kmm,
        tls=serving_tls(rig_folder / "grpc-tls"),
        make_node=make_node,
        folder=rig_folder,
    )
    try:
        yield ChaosWorld(plane, cluster, namespace, rig, kmm, folder)
    finally:
        try:
            rig.close()
        finally:
            kmm.close()
            for name in nodes:
                with contextlib.suppress(Exception):
                    core.delete_node(name)
            with contextlib.suppress(Exception):
                core.delete_namespace(namespace)
            admin.close()
