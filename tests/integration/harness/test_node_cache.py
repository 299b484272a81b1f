"""The KMM emulator's Node cache follows a real API server: new, changed and deleted Nodes,
and its own writes read back at once (never replaced by an older watch event)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.harness.node_cache import NodeCache
from tests.harness.waiting import wait_until
from tests.support.fixture_types import MakeNode

pytestmark = pytest.mark.integration


@pytest.fixture
def cache(kube_admin: Any) -> Any:
    node_cache = NodeCache(k8s.CoreV1Api(kube_admin), lambda: None)
    node_cache.start()
    assert node_cache.wait_synced(30), "the first Node list was not read"
    yield node_cache
    node_cache.stop()
    assert not node_cache.errors


def test_nodes_created_changed_and_deleted_are_followed(
    kube_admin: Any, cache: NodeCache, make_node: MakeNode
) -> None:
    core = k8s.CoreV1Api(kube_admin)
    name = make_node("cached", {"stage": "one"}).metadata.name
    wait_until("the new Node cached", lambda: name in cache.nodes())
    core.patch_node(name, {"metadata": {"labels": {"stage": "two"}}})
    wait_until("the changed label cached", lambda: cache.nodes()[name].labels.get("stage") == "two")
    core.delete_node(name)
    wait_until("the deleted Node gone from the cache", lambda: name not in cache.nodes())


def test_a_recorded_write_is_read_at_once_and_an_older_state_does_not_replace_it(
    kube_admin: Any, cache: NodeCache, make_node: MakeNode
) -> None:
    core: Any = k8s.CoreV1Api(kube_admin)
    name = make_node("written", {"stage": "one"}).metadata.name
    before = json.loads(core.read_node(name, _preload_content=False).data)
    after = json.loads(
        core.patch_node(
            name, {"metadata": {"labels": {"stage": "two"}}}, _preload_content=False
        ).data
    )
    assert cache.record(after).labels["stage"] == "two"
    assert cache.nodes()[name].labels["stage"] == "two"
    assert cache.record(before).labels["stage"] == "two", "an older resourceVersion won"
