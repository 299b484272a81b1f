"""The Node cache lists again when its watch is too old (an ERROR event with code 410), and
keeps what it knew while a watch cannot be opened (plain fakes of the client's calls)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from tests.harness.node_cache import NodeCache
from tests.harness.waiting import wait_until


def node(name: str, revision: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(revision), "labels": labels}}


class Listed:
    def __init__(self, items: list[dict[str, Any]], revision: int) -> None:
        self.data = json.dumps({"metadata": {"resourceVersion": str(revision)}, "items": items})


class Stream:
    """A watch response: its lines, then (`quiet`) it blocks until shut down, as a quiet watch
    does, or it ends, as a watch the server closes does."""

    def __init__(self, events: list[dict[str, Any]], *, quiet: bool = False) -> None:
        self._lines = [json.dumps(event).encode() for event in events]
        self._quiet = quiet
        self._shut = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        yield from self._lines
        if self._quiet:
            self._shut.wait(30)

    def shutdown(self) -> None:
        self._shut.set()

    def release_conn(self) -> None:
        pass


class FakeCore:
    """list_node answers: lists in turn; watches in turn (an exception is raised)."""

    def __init__(self, lists: list[Listed], watches: list[Stream | Exception]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []

    def list_node(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            return self.lists.pop(0)
        self.watched_from.append(kwargs["resource_version"])
        answer = self.watches.pop(0) if len(self.watches) > 1 else self.watches[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_410_watch_lists_again_and_the_new_list_replaces_the_old() -> None:
    core = FakeCore(
        lists=[Listed([node("a", 5, v="1"), node("b", 6)], 6), Listed([node("a", 9, v="2")], 9)],
        watches=[
            Stream([{"type": "MODIFIED", "object": node("b", 7, v="x")}]),
            Stream([{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]),
            Stream([], quiet=True),
        ],
    )
    cache = NodeCache(core, lambda: None)
    cache.start()
    try:
        wait_until("listed again after the 410", lambda: core.watched_from[-1:] == ["9"])
        nodes = cache.nodes()
        assert set(nodes) == {"a"}
        assert nodes["a"].labels == {"v": "2"}
        assert core.watched_from[:2] == ["6", "7"], "the second watch did not go on from b's 7"
    finally:
        cache.stop()


def test_a_watch_that_cannot_be_opened_keeps_the_nodes_and_retries_from_the_same_version() -> None:
    core = FakeCore(
        lists=[Listed([node("a", 5, v="1")], 5)],
        watches=[ConnectionRefusedError("apiserver down"), Stream([], quiet=True)],
    )
    cache = NodeCache(core, lambda: None)
    cache.start()
    try:
        wait_until("watched again after the failure", lambda: len(core.watched_from) >= 2)
        assert core.watched_from[:2] == ["5", "5"]
        assert cache.nodes()["a"].labels == {"v": "1"}
        assert len(cache.errors) == 1
    finally:
        cache.stop()
