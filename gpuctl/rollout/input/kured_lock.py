"""kured's reboot lock, as kured reads and writes it, and gpuctl's claim on it (pure).

kured (github.com/kubereboot/kured) reboots one node at a time: before it drains and reboots
its node, each kured Pod takes a lock kept as an annotation of kured's own DaemonSet
(`weave.works/kured-node-lock`, its `--lock-annotation`; pkg/daemonsetlock). With
`--concurrency 1` (its default) the annotation is one holder,
`{"nodeID","metadata":{"unschedulable"},"created","TTL"}`; with `--concurrency N`,
`{"maxOwners":N,"locks":[holder,...]}`. A holder whose TTL (Go nanoseconds; 0: never) has run
out since `created` counts for nothing (kured's ttlExpired). kured takes the lock only when no
live holder is there (or, several, when fewer than N are), and never reboots without it.

While a node of gpuctl's is in a step, gpuctl holds that lock (every slot of it), so kured
reboots no node mid-step; and while kured holds it (it is draining or rebooting a node),
gpuctl starts no node: KuredRebooting. gpuctl's holders are named `gpuctl.dev/coordinator`
(`...#1`, `...#2` for the slots of a multi lock) and carry a TTL, renewed while it holds, so
a coordinator that is gone for good does not keep kured from rebooting for ever.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuctl.common.names import IN_PROGRESS, STATE_LABEL

KURED_LOCK_ANNOTATION = "weave.works/kured-node-lock"
# What gpuctl holds the lock as: not a node name (a node's is a DNS subdomain, with no "/"),
# so no kured Pod ever takes it for its own.
GPUCTL_HOLDER = "gpuctl.dev/coordinator"
# gpuctl's claim lasts this long unless renewed; renewed once older than RENEW_AFTER.
CLAIM_TTL = timedelta(minutes=15)
RENEW_AFTER = timedelta(minutes=5)
_NANOSECONDS = 1_000_000_000


class KuredLockError(ValueError):
    """The annotation is not a lock kured could have written."""


@dataclass(frozen=True)
class Holder:
    node_id: str
    created: datetime
    ttl: timedelta  # zero: never expires
    unschedulable: bool = False

    def live(self, now: datetime) -> bool:
        """kured's ttlExpired, negated: a TTL of 0 never runs out."""
        return self.ttl <= timedelta(0) or now - self.created < self.ttl

    def is_gpuctl(self) -> bool:
        return self.node_id == GPUCTL_HOLDER or self.node_id.startswith(f"{GPUCTL_HOLDER}#")


@dataclass(frozen=True)
class KuredLock:
    """The lock as read: its holders, and `max_owners` for a multi lock (None: single)."""

    holders: tuple[Holder, ...] = ()
    max_owners: int | None = None


def _holder(data: Any) -> Holder:
    if not isinstance(data, dict) or not isinstance(data.get("nodeID"), str):
        raise KuredLockError(f"a holder without a nodeID: {data!r}")
    created = _time(data.get("created"))
    ttl = data.get("TTL", 0)
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        raise KuredLockError(f"TTL is not a number of nanoseconds: {ttl!r}")
    meta = data.get("metadata") or {}
    unschedulable = bool(meta.get("unschedulable")) if isinstance(meta, dict) else False
    return Holder(data["nodeID"], created, timedelta(microseconds=ttl / 1000), unschedulable)


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def _time(text: Any) -> datetime:
    """Go's time.Time in JSON (RFC 3339, up to nanoseconds; Python keeps microseconds)."""
    match = _RFC3339.match(text) if isinstance(text, str) else None
    if match is None:
        raise KuredLockError(f"created is not an RFC 3339 time: {text!r}")
    seconds, fraction, zone = match.groups()
    micro = (fraction or "").ljust(6, "0")[:6]
    offset = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{seconds}.{micro}{offset}").astimezone(UTC)


def parse_lock(value: str | None) -> KuredLock:
    """The annotation's value as kured wrote it (None or "": nobody holds it)."""
    if not value:
        return KuredLock()
    try:
        data = json.loads(value)
    except ValueError as err:
        raise KuredLockError(f"not JSON: {err}") from None
    if isinstance(data, dict) and "maxOwners" in data:
        owners = data.get("maxOwners")
        if not isinstance(owners, int) or owners < 1:
            raise KuredLockError(f"maxOwners is not a positive number: {owners!r}")
        return KuredLock(tuple(_holder(h) for h in data.get("locks") or []), owners)
    return KuredLock((_holder(data),))


def kured_holder(lock: KuredLock, now: datetime) -> str:
    """The node kured holds the lock for now ("" when none does: free, or gpuctl's)."""
    for holder in lock.holders:
        if holder.live(now) and not holder.is_gpuctl():
            return holder.node_id
    return ""


def held_by_gpuctl(lock: KuredLock, now: datetime, concurrency: int) -> bool:
    """gpuctl holds every slot, none older than RENEW_AFTER (else it renews)."""
    ours = [h for h in lock.holders if h.is_gpuctl() and h.live(now)]
    slots = 1 if concurrency <= 1 else concurrency
    return len(ours) >= slots and all(now - h.created < RENEW_AFTER for h in ours)


def _encode(holder: Holder) -> dict[str, Any]:
    return {
        "nodeID": holder.node_id,
        "metadata": {"unschedulable": holder.unschedulable},
        "created": holder.created.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "TTL": int(holder.ttl.total_seconds() * _NANOSECONDS),
    }


def claimed(lock: KuredLock, now: datetime, concurrency: int) -> str | None:
    """The annotation with gpuctl holding every slot (renewed), or None while kured holds
    one: kured is draining or rebooting a node, and gpuctl waits for it."""
    if kured_holder(lock, now):
        return None
    if concurrency <= 1:
        return json.dumps(_encode(Holder(GPUCTL_HOLDER, now, CLAIM_TTL)), separators=(",", ":"))
    holders = [Holder(f"{GPUCTL_HOLDER}#{i + 1}", now, CLAIM_TTL) for i in range(concurrency)]
    document = {"maxOwners": concurrency, "locks": [_encode(h) for h in holders]}
    return json.dumps(document, separators=(",", ":"))


def released(lock: KuredLock, now: datetime) -> str | None:
    """The annotation without gpuctl's holders: None to take it off (nothing else holds it),
    else what is left (a multi lock's other holders, as they were)."""
    others = [h for h in lock.holders if not h.is_gpuctl() and h.live(now)]
    if not others:
        return None
    if lock.max_owners is None:
        return json.dumps(_encode(others[0]), separators=(",", ":"))
    document = {"maxOwners": lock.max_owners, "locks": [_encode(h) for h in others]}
    return json.dumps(document, separators=(",", ":"))


def nodes_in_a_step(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The Nodes whose rollout state is a step (Checking to Verifying), whatever GPUDriver
    has them: while any is, gpuctl keeps kured's lock."""
    in_step = {str(phase) for phase in IN_PROGRESS}
    return sorted(
        str(node["metadata"]["name"])
        for node in nodes
        if ((node.get("metadata") or {}).get("labels") or {}).get(STATE_LABEL) in in_step
    )
