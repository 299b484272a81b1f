"""Leader election: the pure Lease decision and one elector round against a fake API."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator.kube.client import KubeError
from coordinator.kube.leader import (
    LeaderElector,
    LeaseAction,
    LeaseConfig,
    format_micro_time,
    lease_action,
    parse_micro_time,
)

NOW = datetime(2026, 11, 29, 23, 0, 0, tzinfo=UTC)


def lease(holder: str, renewed: datetime, duration: int = 15) -> dict[str, Any]:
    return {
        "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "5"},
        "spec": {
            "holderIdentity": holder,
            "renewTime": format_micro_time(renewed),
            "leaseDurationSeconds": duration,
        },
    }


def test_actions() -> None:
    assert lease_action(None, "me", NOW) is LeaseAction.CREATE
    assert lease_action(lease("me", NOW), "me", NOW) is LeaseAction.RENEW
    assert lease_action(lease("other", NOW - timedelta(seconds=5)), "me", NOW) is LeaseAction.WAIT
    expired = lease("other", NOW - timedelta(seconds=16))
    assert lease_action(expired, "me", NOW) is LeaseAction.TAKE_OVER
    assert lease_action(lease("", NOW), "me", NOW) is LeaseAction.TAKE_OVER


def test_micro_time_round_trip() -> None:
    moment = datetime(2026, 11, 29, 23, 0, 1, 123456, tzinfo=UTC)
    assert parse_micro_time(format_micro_time(moment)) == moment
    assert parse_micro_time("2026-11-29T23:00:01Z") == moment.replace(microsecond=0)


class FakeLeaseApi:
    """Stores one Lease and enforces resourceVersion like the API server."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "",
    ) -> dict[str, Any]:
        if method == "GET":
            if self.lease is None:
                raise KubeError(404, "NotFound")
            return dict(self.lease)
        if method == "POST":
            if self.lease is not None:
                raise KubeError(409, "AlreadyExists")
        elif method == "PUT":
            assert self.lease is not None
            if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
                raise KubeError(409, "Conflict")
        self.version += 1
        self.lease = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
        }
        return dict(self.lease)

    def watch(self, resource_path: str, query: dict[str, Any], timeout_seconds: int) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


def elector(api: FakeLeaseApi, identity: str, now: list[datetime]) -> LeaderElector:
    """An elector whose wall and monotonic clocks are both the settable `now[0]`."""

    def wall() -> datetime:
        return now[0]

    def monotonic() -> float:
        return now[0].timestamp()

    return LeaderElector(
        api, LeaseConfig(namespace="ns", name="l", identity=identity), now=wall, monotonic=monotonic
    )


def test_only_one_of_two_candidates_leads_until_the_lease_expires() -> None:
    api = FakeLeaseApi()
    clock = [NOW]
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock[0] = NOW + timedelta(seconds=5)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock[0] = NOW + timedelta(seconds=30)
    assert b.try_acquire_or_renew()
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == "b"
    assert api.lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_release_lets_the_standby_take_over_at_once() -> None:
    api = FakeLeaseApi()
    clock = [NOW]
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()
    b.release()
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == ""
    a_again = elector(api, "a", clock)
    a_again.release()  # not the holder: leaves the Lease alone
    assert api.lease["spec"]["holderIdentity"] == ""


def test_leader_steps_down_at_once_when_another_replica_holds_the_lease() -> None:
    api = FakeLeaseApi()
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
        assert api.lease is not None
        api.lease["spec"]["holderIdentity"] = "b"

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
