"""Where remote node views come from: the Kubernetes API (default) or the coordinator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuctl.cli.node_view import NodeView
from gpuctl.rollout.input.pod_facts import PodFacts

DEFAULT_FRESH_TIMEOUT = 15.0


class NodeSource(Protocol):
    def list_nodes(self) -> Sequence[NodeView]: ...

    def get_node(self, name: str, *, fresh: bool, timeout: float) -> NodeView:
        """The node's latest view; with `fresh`, ask its agent now and wait up to `timeout`."""
        ...

    def pods_on(self, name: str) -> Sequence[PodFacts] | None:
        """The node's pods, to name each GPU client's pod (None: this source cannot say)."""
        ...

    def rollout_of(self, name: str) -> str:
        """Where the rollout has the node, in lines (node_rollout.py; "" when none)."""
        ...
