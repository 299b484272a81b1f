"""Since when the coordinator has watched without a gap (the bound on step timeouts): since it
began leading, or the last failed list or watch of the Nodes, Modules or GPUDrivers; a
failing claims watch does not count (its trouble blocks the checks by itself)."""

from __future__ import annotations

import threading

from coordinator.kube.watches import Informer, Resource
from coordinator.manager import _Caches
from tests.support.memory_api import MemoryApi


def informer(plural: str) -> Informer:
    return Informer(MemoryApi(), Resource("", "v1", plural), lambda *_: None, threading.Event())


def test_the_last_gap_of_a_cache_the_steps_wait_on_counts() -> None:
    drivers, nodes, claims, modules = (informer(p) for p in ("d", "n", "c", "m"))
    caches = _Caches(drivers, nodes, claims, modules, leading_since=100.0)
    assert caches.observing_since() == 100.0
    nodes.failed_at = 130.0
    assert caches.observing_since() == 130.0
    modules.failed_at = 140.0
    assert caches.observing_since() == 140.0
    claims.failed_at = 500.0
    assert caches.observing_since() == 140.0
