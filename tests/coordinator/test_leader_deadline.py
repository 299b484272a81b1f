"""The renew deadline is a hard bound: with the API server stalled (etcd stopped), a leader's
renewal gets only the time left before its renew deadline, a late "yes" does not count, the
elector stops leading when the deadline passes, and the LeaderFence refuses writes after it.

`StalledApi` plays an API server whose storage stopped answering: each request waits as long
as it is allowed (ManualClock moves by the timeout given) and fails, and a request without a
timeout waits the client's 30 s and then succeeds, as observed against a real one whose etcd
came back. The clocks are manual; only the elector's sleeps between rounds are real (short).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from coordinator.kube.client import KubeError, path
from coordinator.kube.fence import LeaderFence, NotLeadingError
from coordinator.kube.leader import LeaderElector, LeaseConfig
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

LEASE = path("coordination.k8s.io", "v1", "leases", namespace="ns", name="l")
CLIENT_TIMEOUT = 30.0
CONFIG = LeaseConfig(
    namespace="ns", name="l", identity="a", lease_duration=15, renew_deadline=10, retry_period=2
)


class StalledApi(MemoryApi):
    """MemoryApi that, while `stalled`, spends each request's whole timeout and fails."""

    def __init__(self, clock: ManualClock, *, late_by: float = 0.0) -> None:
        super().__init__()
        self.clock = clock
        self.stalled = False
        # When set, an unstalled request still answers this many seconds past its timeout
        # (a slow answer that arrives after the round's time ran out).
        self.late_by = late_by
        self.timeouts: list[float | None] = []

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
        self.timeouts.append(timeout)
        if self.stalled:
            if timeout is not None:
                self.clock.advance(timeout)
                raise KubeError(0, "ReadTimeoutError")
            self.clock.advance(CLIENT_TIMEOUT)
        elif self.late_by and timeout is not None:
            self.clock.advance(timeout + self.late_by)
        return super().request(
            method, resource_path, query=query, body=body, content_type=content_type
        )


def elector(api: MemoryApi, clock: ManualClock, config: LeaseConfig = CONFIG) -> LeaderElector:
    return LeaderElector(api, config, now=clock.wall, monotonic=clock)


def test_each_request_of_a_round_gets_only_the_time_left_in_it() -> None:
    clock = ManualClock()
    api = StalledApi(clock)
    a = elector(api, clock)
    assert a.try_acquire_or_renew()
    assert api.timeouts == [10.0, 10.0]  # a round's own bound: the renew deadline
    api.timeouts.clear()
    clock.advance(3)
    api.stalled = True
    assert not a.try_acquire_or_renew(timeout=7.0)
    # The GET spent all 7 s; nothing was left for the write, which was never sent.
    assert api.timeouts == [7.0]
    assert clock.now == 1000 + 3 + 7


def test_a_round_answered_after_its_time_ran_out_does_not_count() -> None:
    clock = ManualClock()
    api = StalledApi(clock)
    a = elector(api, clock)
    assert a.try_acquire_or_renew()
    api.late_by = 0.5
    assert not a.try_acquire_or_renew(timeout=4.0)
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "a"  # written, but too late


def run_until_stepped_down(a: LeaderElector, api: StalledApi, clock: ManualClock) -> float:
    """Leads, stalls the API server right after one renewal, and returns how long after the
    start of that renewal (the last that counted) the elector stopped leading."""
    renewed_at: list[float] = []
    stopped_at: list[float] = []
    original = a.try_acquire_or_renew

    def round_then_stall(timeout: float | None = None) -> bool:
        started = clock.now
        ok = original(timeout)
        if ok and a.leading.is_set():
            renewed_at.append(started)
            api.stalled = True
        return ok

    a.try_acquire_or_renew = round_then_stall  # type: ignore[method-assign]
    stop = threading.Event()
    worker = threading.Thread(
        target=a.run, args=(stop, lambda: None, lambda: stopped_at.append(clock.now))
    )
    worker.start()
    worker.join(timeout=30)
    stepped_down_by_itself = not worker.is_alive()
    stop.set()
    worker.join(timeout=5)
    assert stepped_down_by_itself
    return stopped_at[0] - renewed_at[-1]


@pytest.mark.parametrize("retry_period", [0.01, 0.004])
def test_the_leader_stops_leading_within_the_renew_deadline_when_renewals_hang(
    retry_period: float,
) -> None:
    clock = ManualClock()
    api = StalledApi(clock)
    config = LeaseConfig(
        namespace="ns",
        name="l",
        identity="a",
        lease_duration=15,
        renew_deadline=10,
        retry_period=retry_period,
    )
    a = elector(api, clock, config)
    held_for = run_until_stepped_down(a, api, clock)
    # Before the bound, the renewal waited the client's 30 s and then counted.
    assert held_for <= config.renew_deadline
    assert not a.leading.is_set()
    assert a.write_budget() <= 0
    assert all(t is not None and t <= config.renew_deadline for t in api.timeouts)


def test_the_fence_bounds_writes_by_the_time_left_and_refuses_them_after_it() -> None:
    clock = ManualClock()
    api = StalledApi(clock)
    a = elector(api, clock)
    fence = LeaderFence(api, a.write_budget)
    node = path("", "v1", "nodes", name="n")
    api.objects[node] = {"metadata": {"name": "n", "resourceVersion": "1"}}
    patch = {"metadata": {"labels": {"x": "y"}}}
    with pytest.raises(NotLeadingError):  # not leading yet
        fence.request("PATCH", node, body=patch)
    assert a.try_acquire_or_renew()
    a.leading.set()  # as run() does once it holds the Lease
    api.timeouts.clear()
    clock.advance(4)
    fence.request("PATCH", node, body=patch)
    fence.request("PATCH", node, body=patch, timeout=2.0)
    assert api.timeouts == [6.0, 2.0]
    clock.advance(6)
    with pytest.raises(NotLeadingError):
        fence.request("PATCH", node, body=patch)
    assert fence.request("GET", node)["metadata"]["name"] == "n"  # reads still pass
    assert fence.refused == 2
