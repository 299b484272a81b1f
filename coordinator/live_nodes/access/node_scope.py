"""Which Nodes this coordinator serves: every Node, or only those matching `--node-selector`.

A fleet past what one process holds (docs/deploying.md#sharding) runs one coordinator per
node pool, each with a label selector for its pool. Such a shard must leave the other pools'
nodes alone: it refuses their agents (an agent pointed at the wrong shard says so in its log),
writes no GPUNode of theirs (else two shards would undo each other's writes, each marking the
other's nodes disconnected), and answers none of their inspect requests.

`NodeScope.contains` answers True, False, or None while the selected Nodes are not listed
yet: unknown is never taken as "ours" nor as "not ours". Without a selector every node is in
scope and nothing is watched. With one, a Node watch keeps the selected names (and nothing
else of them); a Node entering or leaving the scope is announced (`subscribe`), so work held
back while it was out is done, and what was kept of it can go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from coordinator.kube.client import KubeApi
from coordinator.kube.watches import Informer, Resource
from coordinator.live_nodes.access.identity import RefusalError


def _name_only(obj: dict[str, Any]) -> dict[str, Any]:
    """All that is kept of a Node a scope watches, or of another shard's GPUNode: each is
    kilobytes, its name a few bytes."""
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")}}


def kept_if_ours(
    contains: Callable[[str], bool | None], keep: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A watch's `keep` that keeps objects named after one of our nodes with `keep`, and of
    another shard's only the name (a GPUNode holds a whole report: kilobytes each)."""

    def kept(obj: dict[str, Any]) -> dict[str, Any]:
        if contains(str((obj.get("metadata") or {}).get("name"))) is True:
            return keep(obj)
        return _name_only(obj)

    return kept


def check_in_scope(node: str, in_scope: bool | None, selector: str | None, trouble: str) -> None:
    """Refuses an agent of `node` unless it is known to be one of this coordinator's nodes;
    `trouble` is why its nodes are not listed, if they are not."""
    if in_scope is None:
        why = f": {trouble}" if trouble else ""
        raise RefusalError(
            grpc.StatusCode.UNAVAILABLE,
            f"this coordinator has not listed its nodes (--node-selector {selector!r}) "
            f"yet{why}; try again shortly",
        )
    if not in_scope:
        raise RefusalError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"node {node} does not match this coordinator's --node-selector {selector!r}: "
            "its agent must connect to the coordinator serving its node pool",
        )


class NodeScope:
    """The Nodes this coordinator serves."""

    def __init__(self, kube: KubeApi, selector: str | None, stop: threading.Event) -> None:
        self.selector = selector or None
        self._entered: list[Callable[[str], None]] = []
        self._left: list[Callable[[str], None]] = []
        self._nodes: Informer | None = None
        if self.selector is not None:
            self._nodes = Informer(
                kube,
                Resource("", "v1", "nodes"),
                self._on_node,
                stop,
                label_selector=self.selector,
                keep=_name_only,
            )

    def subscribe(
        self, entered: Callable[[str], None], left: Callable[[str], None] | None = None
    ) -> None:
        """Call `entered(node)` whenever a Node comes into scope (listed, or labelled in), and
        `left(node)` when one goes (deleted, or labelled out)."""
        self._entered.append(entered)
        if left is not None:
            self._left.append(left)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        name = str(node["metadata"]["name"])
        callbacks = {"ADDED": self._entered, "DELETED": self._left}.get(kind, [])
        for callback in callbacks:
            callback(name)

    def contains(self, node: str) -> bool | None:
        """Whether `node` is one of ours; None until the selected Nodes have been listed."""
        if self._nodes is None:
            return True
        if not self._nodes.synced:
            return None
        return self._nodes.get(node) is not None

    def check(self, node: str) -> None:
        """A RefusalError unless `node` is known to be one of ours."""
        nodes = self._nodes
        # Why the pool is not listed, once a list or watch failed ("" while the first list runs).
        trouble = nodes.trouble() if nodes is not None and nodes.failed_at > float("-inf") else ""
        check_in_scope(node, self.contains(node), self.selector, trouble)

    def wait_listed(self, timeout: float) -> bool:
        """Wait until `contains` can answer (at once without a selector)."""
        return self._nodes is None or self._nodes.wait_synced(timeout)

    def run(self) -> None:
        """Watch the selected Nodes until the stop event (returns at once without a selector)."""
        if self._nodes is not None:
            self._nodes.run()
