"""A node's facts from the previous pass, given again while nothing they are made of changed.

A pass looks at every node of the rollout, and between two passes almost none of them
changed: a pass is asked for by one event (one node's write, one agent's answer, one of
KMM's labels). Building a node's NodeFacts (its labels and annotations copied, its readiness
found, a frozen dataclass of eighteen fields) was a fifth of a pass's CPU in a
300-node rollout (docs/benchmarks/notes-rollout-pass.md). `NodeFactsMemo.node_facts` builds them as
facts.node_facts does and keeps them with what they were made of; the next pass gets the
same object back when the Node is the same object at the same resourceVersion (the watch
cache replaces an object on every change and the API server gives every change a new
resourceVersion) and every other input (pods, claims, agent calls, wanted, image, KMM's
activity) is equal. Anything else builds them afresh, so the decision sees exactly what it
would see without the memo; a kept NodeFacts also keeps what it cached of itself (phase,
attempt). Pure: no I/O, no clock; one memo serves one GPUDriver's passes, one at a time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.common.nodes import node_name
from gpuctl.rollout.input.facts import NodeFacts, node_facts


@dataclass(frozen=True)
class _Kept:
    node: Mapping[str, Any]
    resource_version: str
    inputs: Mapping[str, Any]
    facts: NodeFacts


class NodeFactsMemo:
    """Each node's NodeFacts of the last pass, with what they were made of."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}
        self.reused = 0
        self.built = 0

    def node_facts(self, node: Mapping[str, Any], **inputs: Any) -> NodeFacts:
        """facts.node_facts(node, **inputs), or the equal NodeFacts the last pass built."""
        name = node_name(node)
        version = str((node.get("metadata") or {}).get("resourceVersion") or "")
        kept = self._kept.get(name)
        if (
            kept is not None
            and version
            and kept.node is node
            and kept.resource_version == version
            and kept.inputs == inputs
        ):
            self.reused += 1
            return kept.facts
        made = node_facts(node, **inputs)
        self._kept[name] = _Kept(node, version, inputs, made)
        self.built += 1
        return made

    def keep_only(self, names: Collection[str]) -> None:
        """Forget the nodes a pass no longer looks at (deleted, or let go)."""
        for name in self._kept.keys() - set(names):
            del self._kept[name]
