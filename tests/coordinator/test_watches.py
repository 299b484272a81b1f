"""Informer: list, watch, reconnect, relist on 410 without losing changes; the work queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from coordinator.kube.client import KubeError
from coordinator.kube.watches import Informer, Resource, object_key
from coordinator.kube.workqueue import WorkQueue
from tests.support.clock import ManualClock


def obj(name: str, rv: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


class ScriptedApi:
    """Answers lists and watches from scripts; every watch call pops the next script.

    Not the in-memory API server (tests/support/memory_api.py): these tests need the
    informer's exchange itself on cue, each list answer and each watch stream, including
    streams that break and 410 Gone, which no store of objects produces.
    """

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.watch_versions: list[str] = []
        self.list_calls = 0

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        items = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        return {"metadata": {"resourceVersion": str(10 * self.list_calls)}, "items": items}

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        self.watch_versions.append(query["resourceVersion"])
        script = self.watches.pop(0) if self.watches else KubeError(0, "no more scripts")
        if isinstance(script, KubeError):
            raise script
        yield from script

    def close(self) -> None:
        pass


def run_informer(
    api: ScriptedApi, expected: int, **options: Any
) -> tuple[Informer, list[tuple[str, str]]]:
    """Runs an informer (of nodes, with `options` for its fields) until it reported `expected`
    changes (or 5 s passed)."""
    seen: list[tuple[str, str]] = []
    stop = threading.Event()

    def on_change(kind: str, o: dict[str, Any]) -> None:
        seen.append((kind, o["metadata"]["name"]))
        if len(seen) >= expected:
            stop.set()

    options.setdefault("retry_seconds", 0.0)
    informer = Informer(api, Resource("", "v1", "nodes"), on_change, stop, **options)
    thread = threading.Thread(target=informer.run)
    thread.start()
    thread.join(timeout=5)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    return informer, seen


def test_list_then_watch_events_update_the_cache() -> None:
    api = ScriptedApi(
        [[obj("a", "1")]],
        [
            [
                {"type": "ADDED", "object": obj("b", "11")},
                {"type": "BOOKMARK", "object": obj("", "12")},
                {"type": "MODIFIED", "object": obj("a", "13")},
                {"type": "DELETED", "object": obj("b", "14")},
            ]
        ],
    )
    informer, seen = run_informer(api, 4)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert [o["metadata"]["name"] for o in informer.snapshot()] == ["a"]
    assert informer.get("a") == obj("a", "13")


def test_watch_resumes_from_last_resource_version_after_the_stream_ends() -> None:
    api = ScriptedApi(
        [[]],
        [
            [{"type": "ADDED", "object": obj("a", "11")}],
            KubeError(0, "connection reset"),
            [{"type": "ADDED", "object": obj("b", "15")}],
        ],
    )
    informer, seen = run_informer(api, 2)
    assert api.list_calls == 1
    assert api.watch_versions == ["10", "11", "11"]
    assert seen == [("ADDED", "a"), ("ADDED", "b")]
    assert informer.failed_at > float("-inf")  # the broken stream is a gap in what it saw


def test_gone_relists_and_reports_what_changed_meanwhile() -> None:
    api = ScriptedApi(
        [[obj("a", "1"), obj("b", "2")], [obj("a", "5"), obj("c", "6")]],
        [
            [{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
            [{"type": "MODIFIED", "object": obj("c", "21")}],
        ],
    )
    informer, seen = run_informer(api, 6)
    assert api.list_calls == 2
    assert seen == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("ADDED", "c"),
        ("DELETED", "b"),
        ("MODIFIED", "c"),
    ]
    assert sorted(o["metadata"]["name"] for o in informer.snapshot()) == ["a", "c"]


def test_gone_as_http_status_relists_too() -> None:
    api = ScriptedApi(
        [[obj("a", "1")], [obj("a", "1")]],
        [KubeError(410, "Gone"), [{"type": "ADDED", "object": obj("z", "30")}]],
    )
    _, seen = run_informer(api, 2)
    assert api.list_calls == 2
    assert seen == [("ADDED", "a"), ("ADDED", "z")]


def test_unavailable_collection_is_emptied() -> None:
    api = ScriptedApi([[obj("a", "1")]], [[]])
    stop = threading.Event()
    available = [True]
    seen: list[tuple[str, str]] = []

    def on_change(kind: str, o: dict[str, Any]) -> None:
        seen.append((kind, o["metadata"]["name"]))
        if kind == "ADDED":
            available[0] = False
        else:
            stop.set()

    informer = Informer(
        api,
        Resource("kmm.sigs.x-k8s.io", "v1beta1", "modules", "ns"),
        on_change,
        stop,
        available=lambda: available[0],
        retry_seconds=0.0,
    )
    thread = threading.Thread(target=informer.run)
    thread.start()
    thread.join(timeout=5)
    stop.set()
    thread.join(timeout=5)
    assert seen == [("ADDED", "a"), ("DELETED", "a")]
    assert informer.snapshot() == []


def test_paths_and_keys() -> None:
    assert Resource("", "v1", "nodes").collection_path() == "/api/v1/nodes"
    modules = Resource("kmm.sigs.x-k8s.io", "v1beta1", "modules", "ns")
    assert modules.collection_path() == "/apis/kmm.sigs.x-k8s.io/v1beta1/namespaces/ns/modules"
    assert object_key(obj("a", "1", "ns")) == "ns/a"
    assert object_key(obj("a", "1")) == "a"


def test_queue_deduplicates_and_keeps_order() -> None:
    queue = WorkQueue(ManualClock())
    for key in ("a", "b", "a"):
        queue.add(key)
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["a", "b", None]


def test_queue_delayed_keys_come_when_due() -> None:
    clock = ManualClock()
    queue = WorkQueue(clock)
    queue.add_after("later", 5.0)
    assert queue.get(0) is None
    clock.advance(5.0)
    assert queue.get(0) == "later"


def test_queue_wakes_a_waiting_worker() -> None:
    queue = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get(5.0)))
    worker.start()
    queue.add("x")
    worker.join(timeout=5)
    assert got == ["x"]


def test_trouble_says_when_the_cache_is_not_the_truth_until_a_list_succeeds() -> None:
    api = ScriptedApi(
        [[obj("a", "1")]],
        [KubeError(500, "etcd timeout"), [{"type": "ADDED", "object": obj("b", "21")}]],
    )
    stop = threading.Event()
    troubles: list[str] = []
    informer = Informer(
        api, Resource("resource.k8s.io", "v1", "resourceclaims"), lambda *_: None, stop
    )
    assert informer.trouble() == "not listed yet"
    informer.relist_after_error = True
    informer.retry_seconds = 0.0

    def on_change(kind: str, o: dict[str, Any]) -> None:
        troubles.append(informer.trouble())
        if o["metadata"]["name"] == "b":
            stop.set()

    informer.on_change = on_change
    thread = threading.Thread(target=informer.run)
    thread.start()
    thread.join(timeout=5)
    stop.set()
    thread.join(timeout=5)
    # The failed watch made it list again (not watch on), and the list cleared the trouble.
    assert api.list_calls == 2
    assert troubles[-1] == ""
    assert informer.trouble() == ""


def test_a_failed_watch_is_trouble_and_a_404_while_served_is_not_served() -> None:
    failing = Informer(
        ScriptedApi([[]], [KubeError(500, "etcd timeout")]),
        Resource("resource.k8s.io", "v1", "resourceclaims"),
        lambda *_: None,
        threading.Event(),
    )
    assert failing._failed(KubeError(500, "etcd timeout"), "10") == "10"
    assert "listing or watching resourceclaims.resource.k8s.io/v1 failed" in failing.trouble()
    failing.relist_after_error = True
    assert failing._failed(KubeError(0, "connection reset"), "10") is None
    assert failing._failed(KubeError(404, "Not Found"), "10") is None
    assert failing.trouble().startswith("resourceclaims.resource.k8s.io/v1 is not served")


def test_not_served_by_discovery_is_the_truth_an_empty_cache() -> None:
    stop = threading.Event()
    informer = Informer(
        ScriptedApi([[]], []),
        Resource("resource.k8s.io", "v1", "resourceclaims"),
        lambda *_: None,
        stop,
        available=lambda: False,
        retry_seconds=0.0,
    )
    thread = threading.Thread(target=informer.run)
    thread.start()
    assert informer.wait_synced(5)
    stop.set()
    thread.join(timeout=5)
    assert informer.trouble() == ""
    assert informer.snapshot() == []
    assert not informer.served()


def test_served_again_is_not_listed_yet_until_the_list() -> None:
    """Between discovery saying "served" and the first list, the empty cache of the unserved
    time is not the collection's truth: trouble says so, together with served()."""
    informer = Informer(
        ScriptedApi([[obj("claim", "1", "ml")]], []),
        Resource("resource.k8s.io", "v1", "resourceclaims"),
        lambda *_: None,
        threading.Event(),
    )
    informer._go_unavailable()
    assert (informer.served(), informer.trouble()) == (False, "")
    seen: list[tuple[bool, str]] = []
    informer.on_change = lambda *_: seen.append((informer.served(), informer.trouble()))
    informer._list()
    assert seen == [(True, "not listed yet since it became served")]
    assert (informer.served(), informer.trouble()) == (True, "")


class PagedApi(ScriptedApi):
    """Answers a list in pages of `limit` objects with continue tokens, as the API server
    does; records each list request's query."""

    def __init__(self, items: list[dict[str, Any]], watches: list[Any]) -> None:
        super().__init__([items], watches)
        self.queries: list[dict[str, Any]] = []

    def request(self, method: str, resource_path: str, **kw: Any) -> dict[str, Any]:
        query = dict(kw.get("query") or {})
        self.queries.append(query)
        start = int(query.get("continue") or 0)
        end = start + int(query["limit"])
        meta: dict[str, Any] = {"resourceVersion": "10" if start == 0 else "99"}
        if end < len(self.lists[0]):
            meta["continue"] = str(end)
        return {"metadata": meta, "items": self.lists[0][start:end]}


def test_a_list_is_read_in_pages_and_watched_from_the_first_pages_version() -> None:
    items = [obj(f"n{i}", str(i)) for i in range(5)]
    items[0]["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    api = PagedApi(items, [[{"type": "ADDED", "object": obj("n9", "11")}]])
    informer, seen = run_informer(api, 6, page_size=2)
    assert [q.get("continue") for q in api.queries] == [None, "2", "4"]
    assert all(q["limit"] == 2 for q in api.queries)
    assert [name for _, name in seen] == ["n0", "n1", "n2", "n3", "n4", "n9"]
    assert api.watch_versions == ["10"]  # the snapshot's version, not a later page's
    assert "managedFields" not in (informer.get("n0") or {})["metadata"]


def test_managed_fields_are_not_kept_from_watch_events() -> None:
    watched = obj("b", "11")
    watched["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    api = ScriptedApi([[]], [[{"type": "ADDED", "object": watched}]])
    informer, _seen = run_informer(api, 1)
    assert informer.get("b") == obj("b", "11")


def _on(node: str, name: str, rv: str) -> dict[str, Any]:
    pod = obj(name, rv, namespace="ml")
    pod["spec"] = {"nodeName": node}
    return pod


def test_an_index_follows_objects_across_values_and_deletions() -> None:
    api = ScriptedApi(
        [[_on("n1", "a", "1"), _on("n1", "b", "2")]],
        [
            [
                {"type": "MODIFIED", "object": _on("n2", "a", "11")},
                {"type": "DELETED", "object": _on("n1", "b", "12")},
                {"type": "ADDED", "object": _on("n2", "c", "13")},
            ]
        ],
    )
    informer, _seen = run_informer(
        api,
        5,
        index_of=lambda o: str(o["spec"]["nodeName"]),
        keep=lambda o: {**o, "kept": True},
    )
    assert informer.indexed("n1") == []
    assert sorted(o["metadata"]["name"] for o in informer.indexed("n2")) == ["a", "c"]
    assert all(o["kept"] for o in informer.snapshot())
    assert informer.indexed("n3") == []
