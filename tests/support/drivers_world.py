"""The GPUDriver reconciler over a MemoryApi, as its unit tests (and the guard's) build it.

The cluster view reads the GPUDrivers stored in the MemoryApi and shows one amd64 node `n1`
(targeted for gpu-policy) and no ResourceClaims; KMM is served unless a test says otherwise;
every clock reads NOW.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.drivers.guard import BlockerSource
from coordinator.drivers.reconciler import Reconciler, ReconcilerConfig
from coordinator.kube.discovery import Discovery
from coordinator.kube.events import EventRecorder
from gpuctl.common.names import TARGET_LABEL
from tests.support import samples
from tests.support.memory_api import MemoryApi

DRIVERS = "/apis/gpuctl.dev/v1alpha1/gpudrivers"
MODULES = f"/apis/kmm.sigs.x-k8s.io/v1beta1/namespaces/{samples.NAMESPACE}/modules"
NOW = "2026-11-29T23:00:00Z"


class MemoryClusterView:
    """The reconciler's ClusterView: the stored GPUDrivers, node n1, no claims."""

    def __init__(self, api: MemoryApi) -> None:
        self.api = api

    def drivers(self) -> list[dict[str, Any]]:
        return [o for p, o in self.api.objects.items() if p.startswith(DRIVERS)]

    def nodes(self) -> list[dict[str, Any]]:
        return [samples.node("n1", {"kubernetes.io/arch": "amd64", TARGET_LABEL: "gpu-policy"})]

    def claims(self) -> list[dict[str, Any]]:
        return []


def reconciler(
    api: MemoryApi, kmm: bool = True, extra_blocker_sources: Sequence[BlockerSource] = ()
) -> Reconciler:
    groups = {"kmm.sigs.x-k8s.io": ["v1beta1"]} if kmm else {}
    return Reconciler(
        api,
        discovery=Discovery(lambda: groups),
        view=MemoryClusterView(api),
        events=EventRecorder(api, "default", "test", lambda: NOW),
        config=ReconcilerConfig(samples.NAMESPACE),
        now=lambda: NOW,
        extra_blocker_sources=extra_blocker_sources,
    )


def with_driver(api: MemoryApi, driver: dict[str, Any] | None = None) -> None:
    """Stores `driver` (default: samples.driver(), named gpu-policy) as if created."""
    driver = driver if driver is not None else samples.driver()
    api.store(f"{DRIVERS}/{driver['metadata']['name']}", driver)
