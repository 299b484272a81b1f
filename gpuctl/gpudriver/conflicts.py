"""Two GPUDrivers that could load xe on the same node are a conflict, not a race.

KMM would run two module loaders for one kernel module on such a node. Of two GPUDrivers
with a `kernelModule` whose node selectors can match the same node, the older one (by
creation time, then name) keeps its Module; the newer one writes none and reports the
conflict. Pure: plain GPUDriver dicts in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.gpudriver.node_selectors import selectors_can_overlap
from gpuctl.gpudriver.targeting import node_selector


def _age_key(driver: Mapping[str, Any]) -> tuple[str, str]:
    meta = driver["metadata"]
    return (str(meta.get("creationTimestamp", "")), str(meta["name"]))


def conflicting_driver(
    driver: Mapping[str, Any], others: Iterable[Mapping[str, Any]]
) -> str | None:
    """The name of the oldest other GPUDriver that `driver` conflicts with and yields to."""
    spec = driver.get("spec") or {}
    if not spec.get("kernelModule"):
        return None
    mine = node_selector(spec)
    me = _age_key(driver)
    rivals = []
    for other in others:
        other_spec = other.get("spec") or {}
        if other["metadata"]["name"] == driver["metadata"]["name"]:
            continue
        if not other_spec.get("kernelModule") or _age_key(other) > me:
            continue
        if selectors_can_overlap(mine, node_selector(other_spec)):
            rivals.append(_age_key(other))
    return min(rivals)[1] if rivals else None
