"""Since when the coordinator has watched without a gap (the bound on step timeouts): since it
began leading, or the last failed list or watch of the Nodes, Modules or GPUDrivers; a
failing claims, Pod, ModuleImagesConfig or NodeModulesConfig watch does not count (their
trouble blocks the checks, makes the rollout list pods or a Done wait, by itself; the images
only add words to a reason)."""

from __future__ import annotations

import threading

from coordinator.caches import Caches
from coordinator.kube.watches import Informer, Resource
from tests.support.memory_api import MemoryApi


def informer(plural: str) -> Informer:
    return Informer(MemoryApi(), Resource("", "v1", plural), lambda *_: None, threading.Event())


def test_the_last_gap_of_a_cache_the_steps_wait_on_counts() -> None:
    drivers, nodes, claims, modules, pods, images, node_configs = (
        informer(p) for p in ("d", "n", "c", "m", "p", "i", "nmc")
    )
    caches = Caches(
        drivers,
        nodes,
        claims,
        modules,
        pods=pods,
        images_configs=images,
        node_configs=node_configs,
        leading_since=100.0,
    )
    assert caches.observing_since() == 100.0
    nodes.failed_at = 130.0
    assert caches.observing_since() == 130.0
    modules.failed_at = 140.0
    assert caches.observing_since() == 140.0
    claims.failed_at = 500.0
    pods.failed_at = 600.0
    images.failed_at = 700.0
    node_configs.failed_at = 800.0  # a Done waits for it, and says so: no timeout depends on it
    assert caches.observing_since() == 140.0
