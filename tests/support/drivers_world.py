"""The GPUDriver reconciler over a MemoryApi, as its unit tests build it.

The cluster view (the watch caches) reads the GPUDrivers and Nodes stored in the MemoryApi,
so the Node cache and the reconciler's fresh, label-selected Node reads see the same Nodes
unless a test changes one behind the other's back (`MemoryClusterView.frozen_nodes`). KMM is
served unless a test says otherwise; every clock reads NOW.
"""

from __future__ import annotations

from typing import Any

from coordinator.drivers.kmm_check import CRD_PATH, KmmSupportCheck
from coordinator.drivers.reconciler import Reconciler, ReconcilerConfig
from coordinator.kube.discovery import Discovery
from coordinator.kube.events import EventRecorder
from tests.support import samples
from tests.support.memory_api import MemoryApi

DRIVERS = "/apis/gpuctl.dev/v1alpha1/gpudrivers"
MODULES = f"/apis/kmm.sigs.x-k8s.io/v1beta1/namespaces/{samples.NAMESPACE}/modules"
NODES = "/api/v1/nodes"
NOW = "2026-11-29T23:00:00Z"


class MemoryClusterView:
    """The reconciler's ClusterView: the stored GPUDrivers and Nodes (or `frozen_nodes`, a
    cache that has not caught up)."""

    def __init__(self, api: MemoryApi) -> None:
        self.api = api
        self.frozen_nodes: list[dict[str, Any]] | None = None

    def drivers(self) -> list[dict[str, Any]]:
        return [o for p, o in self.api.objects.items() if p.startswith(f"{DRIVERS}/")]

    def nodes(self) -> list[dict[str, Any]]:
        if self.frozen_nodes is not None:
            return self.frozen_nodes
        return [o for p, o in self.api.objects.items() if p.startswith(f"{NODES}/")]


def reconciler(
    api: MemoryApi, kmm: bool = True, view: MemoryClusterView | None = None
) -> Reconciler:
    groups = {"kmm.sigs.x-k8s.io": ["v1beta1"]} if kmm else {}
    if kmm and CRD_PATH not in api.objects:
        api.store(CRD_PATH, samples.kmm_node_config_crd())
    return Reconciler(
        api,
        discovery=Discovery(lambda: groups),
        kmm_support=KmmSupportCheck(api),
        view=view if view is not None else MemoryClusterView(api),
        events=EventRecorder(api, "default", "test", lambda: NOW),
        config=ReconcilerConfig(samples.NAMESPACE),
        now=lambda: NOW,
    )


def with_driver(api: MemoryApi, driver: dict[str, Any] | None = None) -> None:
    """Stores `driver` (default: samples.driver(), named gpu-policy) as if created."""
    driver = driver if driver is not None else samples.driver()
    api.store(f"{DRIVERS}/{driver['metadata']['name']}", driver)


def with_node(api: MemoryApi, node: dict[str, Any]) -> dict[str, Any]:
    """Stores `node` (samples.node) as if registered; the stored copy."""
    return api.store(f"{NODES}/{node['metadata']['name']}", node)
