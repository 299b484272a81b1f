"""The coordinator's side of kured's reboot lock (coordinator/rollout/kured_lock.py) against
the in-memory API server: taken only where kured holds nothing, with the resourceVersion read
as a precondition (a race with kured's own write is read again, never overwritten); renewed;
let go once no Node is in a step; and a DaemonSet that cannot be read holds, saying why."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator.kube.client import KubeError, path
from coordinator.rollout.config import KuredLockConfig
from coordinator.rollout.kured_lock import KuredLockKeeper
from gpuctl.rollout.input.kured_lock import (
    GPUCTL_HOLDER,
    KURED_LOCK_ANNOTATION,
    RENEW_AFTER,
    parse_lock,
)
from tests.support.memory_api import MemoryApi

CONFIG = KuredLockConfig("kube-system", "kured")
DAEMON_SET = path("apps", "v1", "daemonsets", namespace="kube-system", name="kured")
# What kured's Acquire writes for worker-2 (pkg/daemonsetlock/daemonsetlock.go).
KURED_HOLDS = (
    '{"nodeID":"worker-2","metadata":{"unschedulable":false},'
    '"created":"2026-12-07T22:31:08.123456789Z","TTL":0}'
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 7, 22, 40, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def cluster(annotation: str | None = None) -> MemoryApi:
    api = MemoryApi()
    annotations = {KURED_LOCK_ANNOTATION: annotation} if annotation else {}
    api.store(DAEMON_SET, {"metadata": {"name": "kured", "annotations": annotations}})
    return api


def lock_of(api: MemoryApi) -> Any:
    value = api.objects[DAEMON_SET]["metadata"].get("annotations", {}).get(KURED_LOCK_ANNOTATION)
    return None if value is None else json.loads(value)


def node(name: str, state: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"gpuctl.dev/driver-state": state}}}


def test_gpuctl_takes_a_free_lock_renews_it_and_lets_it_go_once_no_node_is_in_a_step() -> None:
    api, clock = cluster(), Clock()
    keeper = KuredLockKeeper(api, CONFIG, clock)
    assert keeper.hold() == ""
    assert lock_of(api)["nodeID"] == GPUCTL_HOLDER
    writes = len(api.writes)
    assert keeper.hold() == ""  # held and young: nothing written
    assert len(api.writes) == writes
    clock.now += RENEW_AFTER
    assert keeper.hold() == ""
    assert lock_of(api)["created"] == "2026-12-07T22:45:00Z"
    keeper.sync([node("a", "Loading"), node("b", "Done")])
    assert lock_of(api) is not None  # a node is still in a step
    keeper.sync([node("a", "Done"), node("b", "Blocked")])
    assert lock_of(api) is None
    assert not keeper.held


def test_while_kured_holds_it_gpuctl_writes_nothing_and_names_kureds_node() -> None:
    api = cluster(KURED_HOLDS)
    keeper = KuredLockKeeper(api, CONFIG, Clock())
    assert keeper.hold() == "worker-2"
    assert api.writes == []
    assert keeper.current() == "worker-2"  # read afresh while kured holds it
    api.objects[DAEMON_SET]["metadata"]["annotations"] = {}  # kured's Release
    assert keeper.current() == ""
    assert keeper.hold() == ""


def test_a_write_that_races_kureds_is_read_again_not_overwritten() -> None:
    api = cluster()
    raced = False  # kured's Acquire lands between gpuctl's read and its write, once

    def request(method: str, resource_path: str, **kwargs: Any) -> dict[str, Any]:
        nonlocal raced
        if method == "PATCH" and not raced:
            raced = True
            obj = api.objects[DAEMON_SET]
            obj["metadata"]["annotations"] = {KURED_LOCK_ANNOTATION: KURED_HOLDS}
            obj["metadata"]["resourceVersion"] = "999"
            sent = kwargs["body"]["metadata"]["resourceVersion"]
            assert sent != "999"  # the precondition the API server refuses
            raise KubeError(409, "Conflict: the object has been modified")
        return MemoryApi.request(api, method, resource_path, **kwargs)

    api.request = request  # type: ignore[method-assign]
    keeper = KuredLockKeeper(api, CONFIG, Clock())
    assert keeper.hold() == "worker-2"
    assert lock_of(api)["nodeID"] == "worker-2"


def test_a_daemon_set_that_cannot_be_read_holds_and_says_why() -> None:
    api = MemoryApi()  # no kured DaemonSet
    keeper = KuredLockKeeper(api, CONFIG, Clock())
    holder = keeper.hold()
    assert holder.startswith("unknown: kured's DaemonSet kube-system/kured cannot be read")
    assert keeper.current() == holder
    broken = cluster("{not json")
    assert (
        "cannot be read or its lock understood (not JSON"
        in KuredLockKeeper(broken, CONFIG, Clock()).hold()
    )
    api.fail[("GET", DAEMON_SET)] = KubeError(500, "etcd down")
    assert keeper.current().startswith("unknown:")


def test_a_multi_lock_takes_every_slot() -> None:
    api = cluster()
    keeper = KuredLockKeeper(api, KuredLockConfig("kube-system", "kured", concurrency=2), Clock())
    assert keeper.hold() == ""
    lock = parse_lock(json.dumps(lock_of(api)))
    assert lock.max_owners == 2
    assert len(lock.holders) == 2
    assert timedelta(0) < RENEW_AFTER


def test_a_node_long_in_a_step_keeps_the_lock_renewed_between_starts() -> None:
    """No pass writes a step for a while (a slow load): sync, after every pass, renews the
    hold before its TTL runs out, and reads nothing until a renewal is due."""
    api, clock = cluster(), Clock()
    keeper = KuredLockKeeper(api, CONFIG, clock)
    assert keeper.hold() == ""
    requests = len(api.requests)
    keeper.sync([node("a", "Loading")])
    assert len(api.requests) == requests  # not due: no call at all
    clock.now += RENEW_AFTER
    keeper.sync([node("a", "Loading")])
    assert lock_of(api)["created"] == "2026-12-07T22:45:00Z"
