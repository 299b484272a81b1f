"""The coordinator's watch caches as their readers see them: one set of informers, read by the
GPUDriver reconciler (coordinator/drivers/reconciler.py's ClusterView) and the rollout
(coordinator/rollout/gather.py's WatchCaches), with since when the caches the steps wait on have
been watched without a gap. coordinator/manager.py makes the informers once leading and hands
this view to both.
"""

from __future__ import annotations

from typing import Any

from coordinator.kube.watches import Informer
from gpuctl.rollout.input.kmm_boots import configured_kernel, loaded_boot


class Caches:
    """The informers, read by the reconciler (ClusterView) and the rollout (WatchCaches)."""

    def __init__(
        self,
        drivers: Informer,
        nodes: Informer,
        claims: Informer,
        modules: Informer,
        *,
        pods: Informer,
        images_configs: Informer,
        node_configs: Informer,
        leading_since: float,
    ) -> None:
        self._drivers, self._nodes, self._claims = drivers, nodes, claims
        self._modules, self._pods, self._images_configs = modules, pods, images_configs
        self._node_configs = node_configs
        self._leading_since = leading_since

    def observing_since(self) -> float:
        """Since when (monotonic) the caches the steps wait on (Nodes with KMM's labels,
        Modules, GPUDrivers) have been watched without a gap: since leading began, or the
        last failed list or watch of one of them. Not the claims: their trouble blocks the
        checks by itself, and a claims watch that keeps failing must not stop every timeout."""
        informers = (self._drivers, self._nodes, self._modules)
        return max(self._leading_since, *(i.failed_at for i in informers))

    def module(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._modules.get(f"{namespace}/{name}")

    def module_images(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._images_configs.get(f"{namespace}/{name}")

    def images_trouble(self) -> str:
        return self._images_configs.trouble()

    def kmm_boot_id(self, node: str, namespace: str, module: str) -> str | None:
        if self._node_configs.trouble():
            return None
        return loaded_boot(self._node_configs.get(node), namespace, module)

    def kmm_kernel(self, node: str, namespace: str, module: str) -> str | None:
        if self._node_configs.trouble():
            return None
        return configured_kernel(self._node_configs.get(node), namespace, module)

    def drivers(self) -> list[dict[str, Any]]:
        return self._drivers.snapshot()

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes.snapshot()

    def claims(self) -> list[dict[str, Any]]:
        return self._claims.snapshot()

    def claims_trouble(self) -> str:
        return self._claims.trouble()

    def claims_served(self) -> bool:
        return self._claims.served()

    def pods_on(self, node: str) -> list[dict[str, Any]] | None:
        if self._pods.trouble():
            return None
        return self._pods.indexed(node)
