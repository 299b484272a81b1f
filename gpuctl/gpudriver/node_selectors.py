"""The equality selectors of a GPUDriver and its Module over plain Node dicts (no I/O).

Used to find the nodes a Module targets (its equality selector) and whether two GPUDrivers can
target the same node. Shared: the coordinator decides with it, and `gpuctl rollout plan` shows
the same answers. A Node's name and labels, and core/v1 NodeSelector matching, are
gpuctl/common/nodes.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.common.nodes import node_labels, node_name


def matches_labels(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """An equality selector (as KMM's Module.spec.selector) against a node's labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def nodes_matching(selector: Mapping[str, str], nodes: Iterable[Mapping[str, Any]]) -> set[str]:
    """Names of the nodes an equality selector selects."""
    return {node_name(n) for n in nodes if matches_labels(selector, node_labels(n))}


def selectors_can_overlap(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """True when some node could carry labels that satisfy both equality selectors.

    That is the case unless the two require different values for the same key.
    """
    return all(b[k] == v for k, v in a.items() if k in b)
