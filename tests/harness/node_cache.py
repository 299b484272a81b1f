"""The KMM emulator's view of every Node: one list, then a watch from its resourceVersion.

KMM's controllers read Nodes from controller-runtime's informer cache, not from a fresh list
per reconcile; the emulator used to list every Node on each pass, which at 5,000 kwok Nodes
cost the API server more than the whole coordinator (bench.fleet_scale). This cache keeps each
Node as the ``NodeView`` KMM's rules read, calls ``on_change`` after every event, and
survives what long watches meet: a watch the server ends is resumed from the last
resourceVersion, a broken connection is retried after a pause, a 410 (an ERROR event, or a
list-then-watch too old) lists again.

Unlike controller-runtime it reads its own writes: ``record`` takes a Node the API server
returned from the emulator's patch, so the next pass does not act on the Node as it was
before that patch. An entry is replaced only by a newer resourceVersion (etcd's revisions
are integers; a harness may rely on that, a client in production may not).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tests.harness.kmm_model import NodeView
from tests.harness.watch_wakeup import OpenWatch

WATCH_SERVER_TIMEOUT_SECONDS = 300
RETRY_SECONDS = 0.5
HTTP_GONE = 410


def _revision(node: Mapping[str, Any]) -> int:
    return int(node["metadata"].get("resourceVersion") or 0)


class NodeCache:
    """Node name -> (resourceVersion, NodeView), kept current by a background thread."""

    def __init__(self, core_api: Any, on_change: Callable[[], None]) -> None:
        self._core = core_api
        self._on_change = on_change
        self._nodes: dict[str, tuple[int, NodeView]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._open = OpenWatch()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="watch-nodes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_seconds: float = 10.0) -> None:
        self._open.stop()
        self._thread.join(timeout_seconds)

    def wait_synced(self, timeout_seconds: float) -> bool:
        """Whether the first list has been read (the cache then says what the server holds)."""
        return self._synced.wait(timeout_seconds)

    def nodes(self) -> dict[str, NodeView]:
        with self._lock:
            return {name: view for name, (_, view) in self._nodes.items()}

    def record(self, node: Mapping[str, Any]) -> NodeView:
        """A Node as a write of the emulator's returned it; the view the cache now holds."""
        self._put(_revision(node), NodeView.from_object(node))
        with self._lock:
            return self._nodes[node["metadata"]["name"]][1]

    def _put(self, revision: int, view: NodeView) -> None:
        with self._lock:
            current = self._nodes.get(view.name)
            if current is None or current[0] < revision:
                self._nodes[view.name] = (revision, view)

    def _list(self) -> str:
        response = self._core.list_node(_preload_content=False)
        listed = json.loads(response.data)
        fresh = {
            item["metadata"]["name"]: (_revision(item), NodeView.from_object(item))
            for item in listed["items"]
        }
        with self._lock:
            self._nodes = fresh
        self._synced.set()
        self._on_change()
        return str(listed["metadata"]["resourceVersion"])

    def _follow(self, resource_version: str) -> str | None:
        """One watch; the resourceVersion to go on from, or None to list again (410)."""
        response = self._core.list_node(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SERVER_TIMEOUT_SECONDS,
            _preload_content=False,
        )
        with self._open.holding(response):
            for line in response:
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == HTTP_GONE:
                        return None
                    raise RuntimeError(f"Node watch error: {obj.get('message')}")
                resource_version = str(obj["metadata"]["resourceVersion"])
                if kind == "DELETED":
                    with self._lock:
                        self._nodes.pop(obj["metadata"]["name"], None)
                elif kind in ("ADDED", "MODIFIED"):
                    self._put(_revision(obj), NodeView.from_object(obj))
                self._on_change()
        return resource_version

    def _run(self) -> None:
        resource_version: str | None = None
        while not self._open.stopped.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list()
                resource_version = self._follow(resource_version)
            except Exception as error:
                if self._open.stopped.is_set():
                    return
                if getattr(error, "status", None) == HTTP_GONE:
                    resource_version = None
                self.errors.append(error)
                self._open.stopped.wait(RETRY_SECONDS)
