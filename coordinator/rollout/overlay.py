"""Nodes as the rollout's own last writes returned them, until the watch cache is as new.

The copy a successful patch returns is used until the watch cache has caught up with it, so
the next pass never counts a node as it was before our own write (which could break the
unavailability bound). resourceVersions are compared as numbers, which holds for the etcd3
storage every kube-apiserver uses (the API calls them opaque; this is the one place that
relies on it).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any


def _resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int(str(obj.get("metadata", {}).get("resourceVersion", "0")))
    except ValueError:
        return 0


class NodeOverlay:
    """Our last written copy of each node, applied over the watch cache's nodes."""

    def __init__(self) -> None:
        self._written: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def remember(self, node: dict[str, Any]) -> None:
        with self._lock:
            self._written[str(node["metadata"]["name"])] = node

    def apply(self, nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        with self._lock:
            for node in nodes:
                name = str(node["metadata"]["name"])
                written = self._written.get(name)
                if written is not None and _resource_version(written) > _resource_version(node):
                    out.append(written)
                    continue
                self._written.pop(name, None)
                out.append(node)
        return out
