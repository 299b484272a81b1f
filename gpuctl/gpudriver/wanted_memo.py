"""Which nodes a GPUDriver wants, each node's answer kept while nothing it depends on changed.

targeting.wanted_nodes looks at every node: its labels against the selector, its taints
against the GPUDriver's tolerations, its kernel against the kernel mappings. The rollout asks it
on every pass and the reconciler (its known issues) on every reconcile, and at 1,000 nodes the
two together were 15 % of the coordinator's Python time in a rollout (py-spy,
docs/benchmarks/notes-fleet-2026-12-05.md), though between two asks almost no node changed.
`WantedMemo.wanted` answers as wanted_nodes
does, and keeps each node's answer with the Node object it was made of: the next ask reuses it
while the node is the same object at the same resourceVersion (a watch cache replaces an
object on every change) and the spec's selector, tolerations and kernel mappings are the
same. Anything else is asked afresh. Pure: no I/O, no clock; one memo serves one caller's
asks for one GPUDriver, one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.common.nodes import node_name
from gpuctl.gpudriver.targeting import node_selector, wants
from gpuctl.gpudriver.tolerations import wanted_tolerations


def targeting_key(spec: Mapping[str, Any]) -> str:
    """Everything of a GPUDriver spec that wanted_nodes reads, as one comparable string."""
    kernel_module = spec.get("kernelModule") or {}
    return json.dumps(
        [
            bool(kernel_module),
            node_selector(spec),
            wanted_tolerations(spec),
            kernel_module.get("kernelMappings") or [],
        ],
        sort_keys=True,
        default=str,
    )


class WantedMemo:
    """Each node's wanted answer of the last ask, with the Node object it was made of."""

    def __init__(self) -> None:
        self._spec_key: str | None = None
        # id(node) -> (node, resourceVersion, name or None when not wanted); the entry holds
        # the node, so its id is not another object's while it is kept.
        self._kept: dict[int, tuple[Mapping[str, Any], str, str | None]] = {}
        self.reused = 0
        self.asked = 0

    def wanted(self, spec: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
        """targeting.wanted_nodes(spec, nodes)."""
        key = targeting_key(spec)
        kept = self._kept if key == self._spec_key else {}
        now: dict[int, tuple[Mapping[str, Any], str, str | None]] = {}
        fresh: list[Mapping[str, Any]] = []
        wanted: list[str] = []
        for node in nodes:
            version = _resource_version(node)
            entry = kept.get(id(node))
            if entry is not None and version and entry[0] is node and entry[1] == version:
                now[id(node)] = entry
                self.reused += 1
                if entry[2] is not None:
                    wanted.append(entry[2])
            else:
                fresh.append(node)
        if fresh:
            answer = wants(spec)
            for node in fresh:
                name = node_name(node) if answer(node) else None
                now[id(node)] = (node, _resource_version(node), name)
                if name is not None:
                    wanted.append(name)
        self.asked += len(fresh)
        self._spec_key, self._kept = key, now
        return frozenset(wanted)


def _resource_version(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("resourceVersion") or "")
