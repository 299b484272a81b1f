"""The GPUNode mirror's writes against the in-memory API server: what, when, how often."""

from __future__ import annotations

import itertools

from coordinator.kube.client import KubeError
from coordinator.live_nodes.gpunodes.mirror import GPUNodeMirror
from coordinator.live_nodes.streams.registry import Registry
from testbed.agent_client import OPEN_CLIENTS, sample_report
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

GPUNODES = "/apis/gpuctl.dev/v1alpha1/gpunodes"
GPUNODE = f"{GPUNODES}/gpu-1"


def _setup() -> tuple[MemoryApi, Registry, GPUNodeMirror, ManualClock]:
    clock = ManualClock()
    api = MemoryApi()
    api.objects["/api/v1/nodes/gpu-1"] = {"metadata": {"name": "gpu-1", "uid": "uid-gpu-1"}}
    registry = Registry(clock, clock.wall)
    mirror = GPUNodeMirror(
        api, registry, monotonic=clock, wall_clock=clock.wall, freshness_seconds=30.0
    )
    return api, registry, mirror, clock


def test_first_report_creates_an_owned_gpunode_then_writes_only_changes() -> None:
    api, registry, mirror, clock = _setup()
    registry.connected("gpu-1", 1, "v1", "boot")
    registry.reported("gpu-1", 1, sample_report("gpu-1", (OPEN_CLIENTS,)), 1)
    mirror.sync("gpu-1")
    assert api.writes == [("POST", GPUNODES), ("PATCH", f"{GPUNODES}/gpu-1/status")]
    (create, patch) = api.bodies
    assert create["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "uid-gpu-1"}
    ]
    assert patch["status"]["summary"]["blockers"] == 1
    assert api.objects[GPUNODE]["status"]["session"] == "Connected"

    clock.advance(5)
    registry.heard("gpu-1", 1, 1)
    registry.reported("gpu-1", 1, sample_report("gpu-1", (OPEN_CLIENTS,), observed_seconds=9), 2)
    mirror.sync("gpu-1")
    assert len(api.writes) == 2  # a heartbeat and an unchanged rescan: nothing written

    registry.reported("gpu-1", 1, sample_report("gpu-1"), 3)
    mirror.sync("gpu-1")
    assert len(api.writes) == 3
    assert api.objects[GPUNODE]["status"]["summary"]["blockers"] == 0
    assert "blockers" not in api.objects[GPUNODE]["status"]["report"]


def test_a_gpunode_another_replica_created_first_is_read_by_name_and_written_on_top() -> None:
    api, registry, mirror, clock = _setup()
    api.store(GPUNODE, {"metadata": {"name": "gpu-1"}, "spec": {}})
    registry.connected("gpu-1", 1, "v1", "boot")
    registry.reported("gpu-1", 1, sample_report("gpu-1"), 1)
    mirror.sync("gpu-1")
    # The create answered 409: the GPUNode is listed by name (list is granted, get is not).
    assert [r for r in api.requests if "gpunodes" in r[1]] == [
        ("POST", GPUNODES),
        ("GET", GPUNODES),
    ]
    clock.advance(5)
    mirror.sync("gpu-1")
    assert api.writes[-1] == ("PATCH", f"{GPUNODE}/status")
    assert api.objects[GPUNODE]["status"]["session"] == "Connected"


def test_a_watch_event_older_than_our_write_is_ignored() -> None:
    api, registry, mirror, _ = _setup()
    registry.connected("gpu-1", 1, "v1", "boot")
    registry.reported("gpu-1", 1, sample_report("gpu-1", (OPEN_CLIENTS,)), 1)
    mirror.sync("gpu-1")
    stale = {"metadata": {"name": "gpu-1", "resourceVersion": "101"}, "status": {}}
    mirror.observed("MODIFIED", stale)  # the create's event, arriving after the status write
    mirror.sync("gpu-1")
    assert len(api.writes) == 2


def test_no_node_no_gpunode() -> None:
    api, registry, mirror, _ = _setup()
    registry.connected("ghost", 1, "v1", "boot")
    registry.reported("ghost", 1, sample_report("ghost"), 1)
    mirror.sync("ghost")
    assert api.writes == []
    assert not any(p.startswith(GPUNODES) for p in api.objects)


def test_orphans_left_connected_by_a_previous_leader_become_disconnected() -> None:
    api, _registry, mirror, _ = _setup()
    api.objects[GPUNODE] = {
        "metadata": {"name": "gpu-1", "resourceVersion": "50"},
        "status": {"session": "Connected", "summary": {"blockers": 0}},
    }
    mirror.observed("ADDED", api.objects[GPUNODE])
    mirror.mark_orphans_disconnected()
    assert mirror.queue.get(timeout=0) == "gpu-1"
    mirror.sync("gpu-1")
    assert api.writes == [("PATCH", f"{GPUNODE}/status")]
    (body,) = api.bodies
    assert body["status"]["session"] == "Disconnected"
    assert body["status"]["unloadBlockers"] == "unknown"
    assert [(c["type"], c["status"], c["reason"]) for c in body["status"]["conditions"]] == [
        ("Fresh", "False", "NoReport")
    ]
    assert api.objects[GPUNODE]["status"]["summary"] == {"blockers": 0}  # kept

    mirror.mark_orphans_disconnected()  # says so already: nothing to write
    assert mirror.queue.get(timeout=0) is None


def test_an_orphan_a_previous_leader_left_fresh_becomes_unknown() -> None:
    api, _registry, mirror, _ = _setup()
    fresh = {
        "type": "Fresh",
        "status": "True",
        "reason": "AgentHeard",
        "message": "",
        "lastTransitionTime": "2026-11-29T23:00:00Z",
    }
    api.objects[GPUNODE] = {
        "metadata": {"name": "gpu-1", "resourceVersion": "50"},
        "status": {"session": "Disconnected", "conditions": [fresh], "unloadBlockers": "0"},
    }
    mirror.observed("ADDED", api.objects[GPUNODE])
    mirror.mark_orphans_disconnected()
    mirror.write_due()
    status = api.objects[GPUNODE]["status"]
    assert (status["conditions"][0]["status"], status["unloadBlockers"]) == ("False", "unknown")


def test_a_write_that_keeps_failing_is_retried_ever_less_often_until_it_succeeds() -> None:
    api, registry, mirror, clock = _setup()
    registry.connected("gpu-1", 1, "v1", "boot")
    registry.reported("gpu-1", 1, sample_report("gpu-1"), 1)
    status = ("PATCH", f"{GPUNODE}/status")
    attempts: list[float] = []
    start = clock()
    mirror.changed("gpu-1")
    for _ in range(200):  # 200 s, a second at a time
        api.fail[status] = KubeError(422, "Invalid")
        before = len(api.requests)
        mirror.write_due()
        if status in api.requests[before:]:
            attempts.append(clock() - start)
        clock.advance(1)
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert gaps == [5, 10, 20, 40, 80], attempts

    api.fail.pop(status)
    clock.advance(80)
    mirror.write_due()
    assert api.objects[GPUNODE]["status"]["session"] == "Connected"
    api.fail[status] = KubeError(422, "Invalid")
    registry.reported("gpu-1", 1, sample_report("gpu-1", (OPEN_CLIENTS,)), 2)
    clock.advance(5)
    mirror.write_due()
    clock.advance(5)
    before = len(api.requests)
    mirror.write_due()
    assert status in api.requests[before:], "after a success the backoff starts again at 5 s"


def _sharded(scope: dict[str, bool | None]) -> tuple[MemoryApi, Registry, GPUNodeMirror]:
    clock = ManualClock()
    api = MemoryApi()
    api.objects["/api/v1/nodes/gpu-1"] = {"metadata": {"name": "gpu-1", "uid": "uid-gpu-1"}}
    registry = Registry(clock, clock.wall)
    mirror = GPUNodeMirror(
        api,
        registry,
        monotonic=clock,
        wall_clock=clock.wall,
        freshness_seconds=30.0,
        in_scope=scope.get,
    )
    return api, registry, mirror


def test_another_shards_gpunode_is_neither_written_nor_kept() -> None:
    scope: dict[str, bool | None] = {"gpu-1": False}
    api, registry, mirror = _sharded(scope)
    theirs = api.store(GPUNODE, {"metadata": {"name": "gpu-1"}, "status": {"session": "Connected"}})
    mirror.observed("ADDED", theirs)
    assert mirror.stored_names() == []  # another pool's report is not held here
    registry.connected("gpu-1", 1, "v1", "boot")  # an agent that got in before the move
    registry.disconnected("gpu-1", 1)
    mirror.sync("gpu-1")
    mirror.mark_orphans_disconnected()
    assert api.writes == []
    scope["gpu-1"] = None  # unknown (not listed yet) is not ours either
    mirror.sync("gpu-1")
    assert api.writes == []


def test_a_node_labelled_into_the_pool_is_read_then_written_and_forgotten_when_it_leaves() -> None:
    scope: dict[str, bool | None] = {"gpu-1": False}
    api, registry, mirror = _sharded(scope)
    theirs = api.store(GPUNODE, {"metadata": {"name": "gpu-1"}, "status": {"session": "Connected"}})
    mirror.observed("ADDED", theirs)
    scope["gpu-1"] = True
    registry.connected("gpu-1", 1, "v1", "boot")
    registry.reported("gpu-1", 1, sample_report("gpu-1"), 1)
    mirror.sync("gpu-1")  # not kept: the create meets the GPUNode, which is then read
    mirror.write_due()
    assert api.writes == [("POST", GPUNODES), ("PATCH", f"{GPUNODE}/status")]
    assert mirror.stored_names() == ["gpu-1"]
    scope["gpu-1"] = False
    mirror.forget("gpu-1")
    assert mirror.stored_names() == []
