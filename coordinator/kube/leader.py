"""Leader election on a coordination.k8s.io/v1 Lease: of several replicas only one acts.

The decision (`lease_action`) is pure: given the Lease as stored, who we are and how long we
have seen it unchanged, it says whether to create, renew, take over or wait. Expiry is judged
on our own monotonic clock from when we saw the Lease last change (as client-go does), never
on its renewTime, which another replica wrote with its wall clock: a replica whose clock runs
ahead would otherwise take the Lease from a leader that renews it on time.

`LeaderElector` does the I/O with optimistic concurrency (the Lease's resourceVersion), so two
replicas racing for an expired Lease cannot both win. On shutdown the leader releases the Lease
so a standby takes over at once instead of after `lease_duration`.

The renew deadline is a hard bound, not a hope: a replica may act only until `renew_deadline`
after the start of its last successful round (`write_budget`). Every round's requests are
given only the time left before that moment, so a request the API server never answers (etcd
stalled) cannot keep a leader acting past it, and a round that succeeds too late does not
count. When the moment passes the elector stops leading at once (`on_stopped`), well before
a standby, which waits `lease_duration` from when it saw the last renewal, may take over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from coordinator.health import NO_HEARTBEAT, Heartbeat
from coordinator.kube.client import KubeApi, KubeError, path
from gpuctl.common import names, timestamps

log = logging.getLogger(__name__)


class LeaseAction(Enum):
    CREATE = "create"
    RENEW = "renew"
    TAKE_OVER = "take-over"
    WAIT = "wait"


def lease_action(
    lease: Mapping[str, Any] | None, identity: str, unchanged_for: float
) -> LeaseAction:
    """What a candidate should do with the Lease as it is stored (None: no Lease yet), having
    seen it unchanged for `unchanged_for` seconds of its own monotonic clock."""
    if lease is None:
        return LeaseAction.CREATE
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return LeaseAction.RENEW
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    duration = int(spec.get("leaseDurationSeconds") or 0)
    if not holder or not renewed:
        return LeaseAction.TAKE_OVER
    if unchanged_for > duration:
        return LeaseAction.TAKE_OVER
    return LeaseAction.WAIT


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    # The gpuctl version of this replica, written on the Lease it holds ("" writes none).
    holder_version: str = ""


class LeaderElector:
    """Campaigns for the Lease; calls `on_started` once leading and `on_stopped` on losing it."""

    def __init__(
        self,
        kube: KubeApi,
        config: LeaseConfig,
        now: Callable[[], datetime],
        monotonic: Callable[[], float],
    ) -> None:
        self._kube = kube
        self._config = config
        self._now = now
        self._monotonic = monotonic
        self.leading = threading.Event()
        # Set when a round saw another replica holding an unexpired Lease.
        self.held_by_other = False
        # monotonic() of the last round that read the Lease (or found none): None until then.
        self.last_lease_read: float | None = None
        # Monotonic time until which this replica may act: the start of its last successful
        # round plus renew_deadline.
        self._valid_until = float("-inf")
        # The Lease's resourceVersion as last seen, and when (monotonic) it was first seen.
        self._observed_version: str | None = None
        self._observed_at = 0.0

    def write_budget(self) -> float:
        """Seconds this replica may still act as the leader (<= 0: it must not write)."""
        if not self.leading.is_set():
            return 0.0
        return self._valid_until - self._monotonic()

    def _path(self, name: str | None = None) -> str:
        return path(
            "coordination.k8s.io", "v1", "leases", namespace=self._config.namespace, name=name
        )

    def _spec(self, lease: Mapping[str, Any] | None, action: LeaseAction) -> dict[str, Any]:
        now = timestamps.format_microseconds(self._now())
        old = dict((lease or {}).get("spec") or {})
        spec = {
            **old,
            "holderIdentity": self._config.identity,
            "leaseDurationSeconds": int(self._config.lease_duration),
            "renewTime": now,
        }
        if action is not LeaseAction.RENEW:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + (
                1 if action is LeaseAction.TAKE_OVER else 0
            )
        return spec

    def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """One round (a read and a write) within `timeout` seconds in all (None: the renew
        deadline); True when we hold the Lease afterwards. A round that took longer than
        that does not count, even if the API server said yes in the end."""
        started = self._monotonic()
        deadline = started + (self._config.renew_deadline if timeout is None else timeout)

        def left() -> float:
            return deadline - self._monotonic()

        try:
            lease: dict[str, Any] | None = self._kube.request(
                "GET", self._path(self._config.name), timeout=left()
            )
        except KubeError as err:
            if not err.not_found:
                log.warning("cannot read lease", extra={"error": str(err)})
                return False
            lease = None
        self.last_lease_read = self._monotonic()
        version = str(((lease or {}).get("metadata") or {}).get("resourceVersion") or "")
        if version != self._observed_version:
            self._observed_version, self._observed_at = version, self._monotonic()
        unchanged_for = self._monotonic() - self._observed_at
        action = lease_action(lease, self._config.identity, unchanged_for)
        self.held_by_other = action is LeaseAction.WAIT
        if action is LeaseAction.WAIT:
            return False
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._config.name, "namespace": self._config.namespace},
            "spec": self._spec(lease, action),
        }
        if self._config.holder_version:
            body["metadata"]["annotations"] = {
                names.COORDINATOR_VERSION: self._config.holder_version
            }
        try:
            if lease is None:
                self._kube.request("POST", self._path(), body=body, timeout=left())
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                self._kube.request("PUT", self._path(self._config.name), body=body, timeout=left())
        except KubeError as err:
            log.info("lease not written", extra={"error": str(err)})
            return False
        if left() < 0:
            log.warning("lease written too late to count", extra={"late_seconds": -left()})
            return False
        self._valid_until = started + self._config.renew_deadline
        if action is not LeaseAction.RENEW:
            log.info("acquired lease", extra={"lease": self._config.name, "action": action.value})
        return True

    def run(
        self,
        stop: threading.Event,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        heartbeat: Heartbeat = NO_HEARTBEAT,
    ) -> None:
        """Campaign, then renew, until `stop` is set, another replica holds the Lease, or the
        renew deadline passes without a renewal. Beats `heartbeat` each round (a Lease loop
        that stops turning is wedged)."""
        while not stop.is_set():
            heartbeat.beat()
            if self.try_acquire_or_renew():
                break
            stop.wait(self._config.retry_period)
        if stop.is_set():
            heartbeat.rest()
            return
        self.leading.set()
        on_started()
        while True:
            left = self._valid_until - self._monotonic()
            if left <= 0:
                log.error("could not renew the lease within the renew deadline; stopping leading")
                break
            if stop.wait(min(self._config.retry_period, left)):
                break
            heartbeat.beat()
            left = self._valid_until - self._monotonic()
            if left > 0 and not self.try_acquire_or_renew(timeout=left) and self.held_by_other:
                log.error("another replica holds the lease; stopping leading")
                break
        self.leading.clear()
        heartbeat.rest()
        on_stopped()

    def release(self) -> None:
        """Give the Lease up (on shutdown) so a standby need not wait for it to expire."""
        timeout = self._config.renew_deadline  # a stalled API server must not hold shutdown up
        try:
            lease = self._kube.request("GET", self._path(self._config.name), timeout=timeout)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self._config.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
            self._kube.request("PUT", self._path(self._config.name), body=lease, timeout=timeout)
            log.info("released lease", extra={"lease": self._config.name})
        except KubeError as err:
            log.warning("could not release lease", extra={"error": str(err)})
