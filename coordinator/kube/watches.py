"""List-and-watch caches of the objects the coordinator reacts to.

An `Informer` keeps an in-memory copy of one collection (GPUDrivers, the namespace's Modules,
Nodes, ResourceClaims) and calls back on every change, so the reconciler reacts within a
second and reads nodes and claims without asking the API server each time. It survives what
long watches meet:

- the server ends a watch (timeoutSeconds): it watches again from the last resourceVersion;
- the connection breaks: it retries from the last resourceVersion after a short pause;
- the resourceVersion is too old (410 Gone, or an ERROR event with code 410): it lists again
  and reports every difference between the old cache and the new list, deletions included,
  so no change is lost;
- the collection is not served (KMM or DRA not installed): it empties its cache, reports the
  removals, and waits until `available()` says it is served.

Lists are read in pages and every object is kept through `keep`: by default without
`metadata.managedFields` (coordinator/kube/paged_list.py says why); a reader that needs little
of a big collection (the rollout of the cluster's Pods) keeps only that. With `index_of`,
objects are also found by that function's value (`indexed`: a node's Pods without a scan).

`trouble()` says when the cache cannot be trusted as the truth: not listed yet, or its list
or watch failed (a 404 while `available()` says the collection is served included). It
stays so until a list succeeds again; with `relist_after_error` the informer lists again
after any failure (instead of watching on from the last resourceVersion), so that is soon.
An empty cache because the collection is not served (`available()` false) is the truth;
`served()` says which of the two the informer last found, and it turns true together with
"not listed yet" trouble, so a reader never takes the empty cache of the unserved time for
the served collection's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.kube.client import KubeApi, KubeError, path
from coordinator.kube.paged_list import DEFAULT_PAGE_SIZE, list_pages, trimmed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resource:
    """A collection: group ("" for core), version, plural, and namespace for namespaced ones."""

    group: str
    version: str
    plural: str
    namespace: str | None = None

    def collection_path(self) -> str:
        return path(self.group, self.version, self.plural, namespace=self.namespace)

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.plural}.{self.group or 'core'}/{self.version}{where}"


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def _version(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


# Called with the change ("ADDED", "MODIFIED", "DELETED") and the object (its last state).
Handler = Callable[[str, dict[str, Any]], None]


def _always() -> bool:
    return True


@dataclass
class Informer:
    """One collection's cache, kept current by list + watch; `on_change` on each change."""

    kube: KubeApi
    resource: Resource
    on_change: Handler
    stop: threading.Event
    available: Callable[[], bool] = _always
    label_selector: str | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    keep: Callable[[dict[str, Any]], dict[str, Any]] = trimmed
    index_of: Callable[[dict[str, Any]], str] | None = None
    watch_timeout_seconds: int = 240
    retry_seconds: float = 1.0
    # List again after a failed list or watch: `trouble()` clears only on a successful list.
    relist_after_error: bool = False
    _cache: dict[str, dict[str, Any]] = field(default_factory=dict)
    # index_of's value -> key -> object (only with index_of).
    _index: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _synced: threading.Event = field(default_factory=threading.Event)
    _trouble: str = "not listed yet"
    _served: bool = True
    relists: int = 0
    # When a list or watch last failed (monotonic): changes may have been missed until the
    # next list, so time since then is all the cache has seen for sure.
    failed_at: float = float("-inf")
    monotonic: Callable[[], float] = time.monotonic

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._cache.values())

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._cache.get(key)

    def indexed(self, value: str) -> list[dict[str, Any]]:
        """The cached objects whose `index_of` is `value` (none without index_of)."""
        with self._lock:
            return list((self._index.get(value) or {}).values())

    def _unindex(self, key: str, obj: dict[str, Any] | None) -> None:
        if obj is None or self.index_of is None:
            return
        value = self.index_of(obj)
        entries = self._index.get(value)
        if entries is not None:
            entries.pop(key, None)
            if not entries:
                del self._index[value]

    def _reindex(self, key: str, obj: dict[str, Any]) -> None:
        if self.index_of is not None:
            self._index.setdefault(self.index_of(obj), {})[key] = obj

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        """Listed once (or its API found unavailable): the cache says what the server holds."""
        return self._synced.is_set()

    def trouble(self) -> str:
        """Why the cache cannot be trusted now ("" when it can)."""
        with self._lock:
            return self._trouble

    def served(self) -> bool:
        """Whether the collection was served when last looked at (see the module docstring)."""
        with self._lock:
            return self._served

    def _set_trouble(self, why: str) -> None:
        with self._lock:
            self._trouble = why

    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector} if self.label_selector else {}

    def _replace(self, items: list[dict[str, Any]]) -> None:
        fresh = {object_key(o): o for o in items}
        with self._lock:
            old, self._cache = self._cache, fresh
            self._index = {}
            for key, obj in fresh.items():
                self._reindex(key, obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self.on_change("ADDED", obj)
            elif _version(before) != _version(obj):
                self.on_change("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self.on_change("DELETED", obj)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        obj = self.keep(obj)
        key = object_key(obj)
        with self._lock:
            self._unindex(key, self._cache.get(key))
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
                self._reindex(key, obj)
        self.on_change(kind, obj)

    def _list(self) -> str:
        with self._lock:
            if not self._served:
                self._served, self._trouble = True, "not listed yet since it became served"
        items, resource_version = list_pages(
            self.kube,
            self.resource.collection_path(),
            self._query(),
            page_size=self.page_size,
            keep=self.keep,
        )
        self._replace(items)
        self._set_trouble("")
        self.relists += 1
        self._synced.set()
        return resource_version

    def _watch(self, resource_version: str) -> str | None:
        """Follow one watch; the resourceVersion to go on from, or None to list again."""
        query = {**self._query(), "resourceVersion": resource_version, "allowWatchBookmarks": True}
        events = self.kube.watch(self.resource.collection_path(), query, self.watch_timeout_seconds)
        for event in events:
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                error = KubeError(int(obj.get("code") or 0), str(obj.get("message")), obj)
                if error.gone:
                    return None
                raise error
            resource_version = str(obj.get("metadata", {}).get("resourceVersion", resource_version))
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
            if self.stop.is_set():
                break
        return resource_version

    def _go_unavailable(self) -> None:
        if self._cache:
            self._replace([])
        with self._lock:
            self._served, self._trouble = False, ""
        self._synced.set()

    def _failed(self, err: KubeError, resource_version: str | None) -> str | None:
        """After a failed list or watch: the resourceVersion to go on from (None: list)."""
        if err.gone:
            return None
        if err.not_found:
            self._go_unavailable()
            self._set_trouble(f"{self.resource} is not served: {err}")
            return None
        self._set_trouble(f"listing or watching {self.resource} failed: {err}")
        return None if self.relist_after_error else resource_version

    def run(self) -> None:
        """List and watch until `stop` is set."""
        resource_version: str | None = None
        while not self.stop.is_set():
            if not self.available():
                self._go_unavailable()
                resource_version = None
                self.stop.wait(self.retry_seconds)
                continue
            try:
                if resource_version is None:
                    resource_version = self._list()
                resource_version = self._watch(resource_version)
                if resource_version is None:
                    log.info("watch expired, listing again", extra={"resource": str(self.resource)})
            except KubeError as err:
                self.failed_at = self.monotonic()
                resource_version = self._failed(err, resource_version)
                if not self.stop.is_set():
                    log.warning(
                        "watch failed, retrying",
                        extra={"resource": str(self.resource), "error": str(err)},
                    )
                self.stop.wait(self.retry_seconds)
