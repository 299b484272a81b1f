"""The GPUNode mirror's writes against a hand-written API server fake: what, when, how often."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from coordinator.kube.client import KubeError
from coordinator.live_nodes.gpunode_status import apply_merge
from coordinator.live_nodes.mirror import GPUNodeMirror
from coordinator.live_nodes.registry import Registry
from tests.support.agent_client import OPEN_CLIENTS, sample_report
from tests.support.clock import ManualClock

GPUNODES = "/apis/gpuctl.dev/v1alpha1/gpunodes"


class FakeApiServer:
    """Nodes and GPUNodes in memory, with resourceVersions; records every write."""

    def __init__(self, nodes: tuple[str, ...]) -> None:
        self.nodes = {n: {"metadata": {"name": n, "uid": f"uid-{n}"}} for n in nodes}
        self.gpunodes: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, Any]] = []
        self.version = 100

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def request(self, method: str, resource_path: str, **kwargs: Any) -> dict[str, Any]:
        body: Any = kwargs.get("body")
        if method != "GET":
            self.writes.append((method, resource_path, body))
        if method == "GET" and resource_path.startswith("/api/v1/nodes/"):
            name = resource_path.rsplit("/", 1)[1]
            if name not in self.nodes:
                raise KubeError(404, "NotFound")
            return self.nodes[name]
        if method == "POST" and resource_path == GPUNODES:
            created = self._bump({**body, "metadata": dict(body["metadata"])})
            self.gpunodes[body["metadata"]["name"]] = created
            return created
        if method == "PATCH" and resource_path.endswith("/status"):
            name = resource_path.split("/")[-2]
            stored = self.gpunodes[name]
            stored["status"] = apply_merge(stored.get("status") or {}, body["status"])
            return self._bump(stored)
        raise AssertionError(f"unexpected {method} {resource_path}")

    def watch(self, *_args: Any) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _setup() -> tuple[FakeApiServer, Registry, GPUNodeMirror, ManualClock]:
    clock = ManualClock()
    api = FakeApiServer(("gpu-1",))
    registry = Registry(clock, clock.wall)
    mirror = GPUNodeMirror(api, registry, monotonic=clock)
    return api, registry, mirror, clock


def test_first_report_creates_an_owned_gpunode_then_writes_only_changes() -> None:
    api, registry, mirror, clock = _setup()
    registry.connected("gpu-1", 1, "v1", "boot")
    registry.reported("gpu-1", 1, sample_report("gpu-1", (OPEN_CLIENTS,)), 1)
    mirror.sync("gpu-1")
    (create, patch) = api.writes
    assert create[0] == "POST"
    assert create[2]["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "uid-gpu-1"}
    ]
    assert patch[2]["status"]["summary"]["blockers"] == 1
    assert api.gpunodes["gpu-1"]["status"]["session"] == "Connected"

    clock.advance(5)
    registry.heard("gpu-1", 1, 1)
    registry.reported("gpu-1", 1, sample_report("gpu-1", (OPEN_CLIENTS,), observed_seconds=9), 2)
    mirror.sync("gpu-1")
    assert len(api.writes) == 2  # a heartbeat and an unchanged rescan: nothing written

    registry.reported("gpu-1", 1, sample_report("gpu-1"), 3)
    mirror.sync("gpu-1")
    assert len(api.writes) == 3
    assert api.gpunodes["gpu-1"]["status"]["summary"]["blockers"] == 0
    assert "blockers" not in api.gpunodes["gpu-1"]["status"]["report"]


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
    assert api.gpunodes == {}


def test_orphans_left_connected_by_a_previous_leader_become_disconnected() -> None:
    api, _registry, mirror, _ = _setup()
    api.gpunodes["gpu-1"] = {
        "metadata": {"name": "gpu-1", "resourceVersion": "50"},
        "status": {"session": "Connected", "summary": {"blockers": 0}},
    }
    mirror.observed("ADDED", api.gpunodes["gpu-1"])
    mirror.mark_orphans_disconnected()
    assert mirror.queue.get(timeout=0) == "gpu-1"
    mirror.sync("gpu-1")
    assert api.writes == [
        ("PATCH", f"{GPUNODES}/gpu-1/status", {"status": {"session": "Disconnected"}})
    ]
    assert api.gpunodes["gpu-1"]["status"]["summary"] == {"blockers": 0}  # kept
