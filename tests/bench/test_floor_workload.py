"""bench/floor_workload.py: the floor's steps 3 and 7 of KMM's ordered upgrade. The workload's
pods are followed by node through a watch (deletions included); each pod on a batch's nodes is
evicted once, through the Eviction API, and the batch is clear only when none is left; a pod
already gone is no error, any other refusal is; cordon and uncordon are one PATCH a node."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from bench.floor_workload import (
    PodOnNode,
    Workload,
    WorkloadPods,
    evict_remaining,
    set_unschedulable,
)
from coordinator.kube.client import KubeError
from tests.support.memory_api import MemoryApi

WORKLOAD = Workload("fleet", "app=train")


def pod(name: str, node: str, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "fleet",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"app": "train"},
            "resourceVersion": version,
        },
        "spec": {"nodeName": node},
    }


class WatchedApi(MemoryApi):
    """The unit tests' API server with one scripted watch of the pods: its events once, then
    watches that wait until `close`."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__()
        self.events = events
        self.events_applied = threading.Event()
        self.closed = threading.Event()
        self._watched = False

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        if self._watched:
            self.closed.wait(30)
            return
        self._watched = True
        yield from self.events
        self.events_applied.set()  # the generator resumed: the last event was applied

    def close(self) -> None:
        self.closed.set()


class Pods:
    """A PodsByNode over a plain list the test changes."""

    def __init__(self, *pods: PodOnNode) -> None:
        self.pods = list(pods)

    def on(self, nodes: Collection[str]) -> list[PodOnNode]:
        return [p for p in self.pods if p.node in nodes]


def evictions(kube: MemoryApi) -> list[str]:
    return [url for method, url in kube.writes if method == "POST"]


def test_each_pod_on_the_batch_is_evicted_once_and_the_batch_is_clear_when_none_is_left() -> None:
    kube = MemoryApi()
    a, b = PodOnNode("fleet", "a", "uid-a", "n1"), PodOnNode("fleet", "b", "uid-b", "n2")
    elsewhere = PodOnNode("fleet", "c", "uid-c", "n9")
    pods, evicted = Pods(a, b, elsewhere), set[str]()
    assert not evict_remaining(kube, pods, {"n1", "n2"}, evicted)
    assert evictions(kube) == [
        "/api/v1/namespaces/fleet/pods/a/eviction",
        "/api/v1/namespaces/fleet/pods/b/eviction",
    ]
    body = kube.bodies[0]
    assert body["kind"] == "Eviction"
    assert body["metadata"] == {"name": "a", "namespace": "fleet"}
    pods.pods.remove(a)  # a is gone, b is still terminating: not clear, b not evicted again
    assert not evict_remaining(kube, pods, {"n1", "n2"}, evicted)
    assert len(evictions(kube)) == 2
    pods.pods.remove(b)
    assert evict_remaining(kube, pods, {"n1", "n2"}, evicted)
    assert len(evictions(kube)) == 2
    assert evicted == {"uid-a", "uid-b"}


def test_a_pod_that_lands_on_the_batch_later_is_evicted_too() -> None:
    kube, pods, evicted = MemoryApi(), Pods(), set[str]()
    assert evict_remaining(kube, pods, {"n1"}, evicted)
    pods.pods.append(PodOnNode("fleet", "late", "uid-late", "n1"))
    assert not evict_remaining(kube, pods, {"n1"}, evicted)
    assert evictions(kube) == ["/api/v1/namespaces/fleet/pods/late/eviction"]


def test_a_pod_already_gone_is_no_error_but_another_refusal_is() -> None:
    eviction = ("POST", "/api/v1/namespaces/fleet/pods/a/eviction")
    gone, broken = MemoryApi(), MemoryApi()
    gone.fail[eviction] = KubeError(404, "NotFound")
    broken.fail[eviction] = KubeError(500, "InternalError")
    pods = Pods(PodOnNode("fleet", "a", "uid-a", "n1"))
    assert not evict_remaining(gone, pods, {"n1"}, set())
    with pytest.raises(KubeError, match="500"):
        evict_remaining(broken, pods, {"n1"}, set())


def test_cordon_and_uncordon_are_one_patch_a_node() -> None:
    kube = MemoryApi()
    for name in ("n1", "n2"):
        kube.store(f"/api/v1/nodes/{name}", {"metadata": {"name": name}})
    set_unschedulable(kube, ["n1", "n2"], True)
    assert kube.objects["/api/v1/nodes/n2"]["spec"] == {"unschedulable": True}
    set_unschedulable(kube, ["n1"], False)
    assert kube.writes == [
        ("PATCH", "/api/v1/nodes/n1"),
        ("PATCH", "/api/v1/nodes/n2"),
        ("PATCH", "/api/v1/nodes/n1"),
    ]
    assert kube.objects["/api/v1/nodes/n1"]["spec"] == {"unschedulable": False}
    assert kube.objects["/api/v1/nodes/n2"]["spec"] == {"unschedulable": True}


def test_the_workloads_pods_are_followed_by_node_from_the_list_and_the_watch() -> None:
    kube = WatchedApi(
        events=[
            {"type": "DELETED", "object": pod("a", "n1", "2")},
            {"type": "ADDED", "object": pod("a2", "", "3")},  # a replacement, not yet placed
            {"type": "MODIFIED", "object": pod("a2", "n5", "4")},
        ],
    )
    kube.answer(
        "GET",
        "/api/v1/namespaces/fleet/pods",
        {"metadata": {"resourceVersion": "1"}, "items": [pod("a", "n1"), pod("b", "n2")]},
    )
    pods = WorkloadPods(kube, WORKLOAD)
    try:
        assert kube.events_applied.wait(30)
        assert pods.on({"n1"}) == []
        assert pods.on({"n2", "n5"}) == [
            PodOnNode("fleet", "b", "uid-b", "n2"),
            PodOnNode("fleet", "a2", "uid-a2", "n5"),
        ]
        assert kube.requests[0] == ("GET", "/api/v1/namespaces/fleet/pods")
    finally:
        pods.stop()
        kube.close()
