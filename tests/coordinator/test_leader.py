"""Leader election: the pure Lease decision, and elector rounds against the in-memory API
server (its PUT refuses a stale resourceVersion, as the real one does)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator.kube.client import path
from coordinator.kube.leader import LeaderElector, LeaseAction, LeaseConfig, lease_action
from gpuctl.common.timestamps import format_microseconds
from tests.support.memory_api import MemoryApi

NOW = datetime(2026, 11, 29, 23, 0, 0, tzinfo=UTC)
LEASE = path("coordination.k8s.io", "v1", "leases", namespace="ns", name="l")


def lease(holder: str, renewed: datetime, duration: int = 15) -> dict[str, Any]:
    return {
        "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "5"},
        "spec": {
            "holderIdentity": holder,
            "renewTime": format_microseconds(renewed),
            "leaseDurationSeconds": duration,
        },
    }


def test_actions() -> None:
    assert lease_action(None, "me", 0) is LeaseAction.CREATE
    assert lease_action(lease("me", NOW), "me", 0) is LeaseAction.RENEW
    assert lease_action(lease("other", NOW), "me", 5) is LeaseAction.WAIT
    assert lease_action(lease("other", NOW), "me", 16) is LeaseAction.TAKE_OVER
    assert lease_action(lease("", NOW), "me", 0) is LeaseAction.TAKE_OVER
    # Expiry is our own observation, not the holder's renewTime: one written an hour "ago"
    # by a clock behind ours, just seen, is not expired.
    assert lease_action(lease("other", NOW - timedelta(hours=1)), "me", 0) is LeaseAction.WAIT


def test_a_candidate_whose_clock_runs_ahead_does_not_take_a_renewed_lease() -> None:
    api = MemoryApi()
    true_time = [NOW]
    a = elector(api, "a", true_time)
    monotonic = [0.0]
    b = LeaderElector(
        api,
        LeaseConfig(namespace="ns", name="l", identity="b"),
        now=lambda: true_time[0] + timedelta(hours=1),  # skewed an hour ahead
        monotonic=lambda: monotonic[0],
    )
    assert a.try_acquire_or_renew()
    for _ in range(20):  # a renews every 5 s; b's own clock says each renewal is an hour old
        true_time[0] += timedelta(seconds=5)
        monotonic[0] += 5
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a stops renewing: b takes over once it has seen no change for the lease's duration.
    monotonic[0] += 10
    assert not b.try_acquire_or_renew()
    monotonic[0] += 6
    assert b.try_acquire_or_renew()
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "b"


def elector(api: MemoryApi, identity: str, now: list[datetime]) -> LeaderElector:
    """An elector whose wall and monotonic clocks are both the settable `now[0]`."""

    def wall() -> datetime:
        return now[0]

    def monotonic() -> float:
        return now[0].timestamp()

    return LeaderElector(
        api, LeaseConfig(namespace="ns", name="l", identity=identity), now=wall, monotonic=monotonic
    )


def test_only_one_of_two_candidates_leads_until_the_lease_expires() -> None:
    api = MemoryApi()
    clock = [NOW]
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock[0] = NOW + timedelta(seconds=5)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock[0] = NOW + timedelta(seconds=30)
    assert b.try_acquire_or_renew()
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "b"
    assert api.objects[LEASE]["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_release_lets_the_standby_take_over_at_once() -> None:
    api = MemoryApi()
    clock = [NOW]
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()
    b.release()
    assert api.objects[LEASE]["spec"]["holderIdentity"] == ""
    a_again = elector(api, "a", clock)
    a_again.release()  # not the holder: leaves the Lease alone
    assert api.objects[LEASE]["spec"]["holderIdentity"] == ""


def test_leader_steps_down_at_once_when_another_replica_holds_the_lease() -> None:
    api = MemoryApi()
    clock = [NOW]
    a = LeaderElector(
        api,
        LeaseConfig(namespace="ns", name="l", identity="a", retry_period=0.01),
        now=lambda: clock[0],
        monotonic=lambda: 0.0,  # never past the renew deadline: only the holder check stops `a`
    )
    events: list[str] = []

    def started() -> None:
        events.append("started")
        # Another replica writes the Lease (e.g. after `a` was paused past its duration).
        api.objects[LEASE]["spec"]["holderIdentity"] = "b"

    stop = threading.Event()
    worker = threading.Thread(target=a.run, args=(stop, started, lambda: events.append("stopped")))
    worker.start()
    worker.join(timeout=5)
    stepped_down_by_itself = not worker.is_alive()
    stop.set()
    worker.join(timeout=5)
    assert stepped_down_by_itself
    assert events == ["started", "stopped"]
    assert a.held_by_other
    assert not a.leading.is_set()


def test_the_holder_writes_its_gpuctl_version_on_the_lease() -> None:
    api = MemoryApi()
    clock = [NOW]

    def replica(identity: str, version: str) -> LeaderElector:
        config = LeaseConfig(namespace="ns", name="l", identity=identity, holder_version=version)

        def seconds() -> float:
            return clock[0].timestamp()

        return LeaderElector(api, config, now=lambda: clock[0], monotonic=seconds)

    old, upgraded = replica("a", "1.4.2"), replica("b", "1.5.0")
    assert old.try_acquire_or_renew()
    annotations = api.objects[LEASE]["metadata"]["annotations"]
    assert annotations == {"gpuctl.dev/coordinator-version": "1.4.2"}
    assert not upgraded.try_acquire_or_renew()
    # The upgraded replica takes over once the Lease expires, and writes its own version.
    clock[0] = NOW + timedelta(seconds=30)
    assert upgraded.try_acquire_or_renew()
    version = api.objects[LEASE]["metadata"]["annotations"]["gpuctl.dev/coordinator-version"]
    assert version == "1.5.0"
