"""kured's reboot lock as kured writes it, and gpuctl's claim on it.

The annotation values below are byte for byte what kured's pkg/daemonsetlock/daemonsetlock.go
writes: encoding/json over LockAnnotationValue{NodeID, Metadata{Unschedulable}, Created
(time.Time: RFC 3339 with nanoseconds, trailing zeros dropped), TTL (time.Duration: int64
nanoseconds)}, and multiLockAnnotationValue{MaxOwners, LockAnnotations `json:"locks"`}.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.kured_lock import (
    CLAIM_TTL,
    GPUCTL_HOLDER,
    RENEW_AFTER,
    KuredLock,
    KuredLockError,
    claimed,
    held_by_gpuctl,
    kured_holder,
    nodes_in_a_step,
    parse_lock,
    released,
)
from gpuctl.rollout.input.settings import RolloutSettings
from tests.support.rollout_samples import TARGET, node, rollout

NOW = datetime(2026, 12, 7, 22, 40, tzinfo=UTC)
# Acquire on worker-2 at 22:31:08.123456789, --lock-ttl unset (0: never expires).
SINGLE = (
    '{"nodeID":"worker-2","metadata":{"unschedulable":false},'
    '"created":"2026-12-07T22:31:08.123456789Z","TTL":0}'
)
# --lock-ttl=30m: 1800000000000 ns; taken at 22:00, so expired at 22:30.
EXPIRED = (
    '{"nodeID":"worker-3","metadata":{"unschedulable":true},'
    '"created":"2026-12-07T22:00:00Z","TTL":1800000000000}'
)
# --concurrency=2, one slot taken by worker-4.
MULTI = (
    '{"maxOwners":2,"locks":[{"nodeID":"worker-4","metadata":{"unschedulable":false},'
    '"created":"2026-12-07T22:35:00.5Z","TTL":0}]}'
)


def test_kureds_single_lock_names_its_node_until_its_ttl_runs_out() -> None:
    lock = parse_lock(SINGLE)
    assert lock.max_owners is None
    [holder] = lock.holders
    assert holder.created == datetime(2026, 12, 7, 22, 31, 8, 123456, tzinfo=UTC)
    assert kured_holder(lock, NOW) == "worker-2"
    assert claimed(lock, NOW, 1) is None  # kured reboots worker-2: gpuctl waits
    expired = parse_lock(EXPIRED)
    assert expired.holders[0].unschedulable
    assert kured_holder(expired, NOW) == ""
    assert kured_holder(expired, datetime(2026, 12, 7, 22, 29, tzinfo=UTC)) == "worker-3"


def test_gpuctls_claim_is_a_value_kured_reads_as_held_by_no_node_of_its_own() -> None:
    value = claimed(KuredLock(), NOW, 1)
    assert value is not None
    document = json.loads(value)
    assert document == {
        "nodeID": GPUCTL_HOLDER,
        "metadata": {"unschedulable": False},
        "created": "2026-12-07T22:40:00Z",
        "TTL": int(CLAIM_TTL.total_seconds()) * 1_000_000_000,
    }
    assert "/" in GPUCTL_HOLDER  # no Node is named so: no kured Pod takes it for its own
    lock = parse_lock(value)
    assert kured_holder(lock, NOW) == ""
    assert held_by_gpuctl(lock, NOW, 1)
    assert not held_by_gpuctl(lock, NOW + RENEW_AFTER, 1)  # renewed before it runs out
    assert released(lock, NOW) is None  # the annotation comes off


def test_a_multi_lock_is_claimed_in_every_slot_and_waits_for_kureds_one() -> None:
    lock = parse_lock(MULTI)
    assert lock.max_owners == 2
    assert kured_holder(lock, NOW) == "worker-4"
    assert claimed(lock, NOW, 2) is None
    free = claimed(KuredLock(), NOW, 3)
    assert free is not None
    document = json.loads(free)
    assert document["maxOwners"] == 3
    assert [h["nodeID"] for h in document["locks"]] == [
        f"{GPUCTL_HOLDER}#1",
        f"{GPUCTL_HOLDER}#2",
        f"{GPUCTL_HOLDER}#3",
    ]
    assert held_by_gpuctl(parse_lock(free), NOW, 3)
    assert not held_by_gpuctl(parse_lock(free), NOW, 4)  # kured's --concurrency grew


def test_letting_go_keeps_what_is_not_gpuctls() -> None:
    mixed = {
        "maxOwners": 2,
        "locks": [
            json.loads(SINGLE),
            {**json.loads(SINGLE), "nodeID": f"{GPUCTL_HOLDER}#1"},
        ],
    }
    kept = released(parse_lock(json.dumps(mixed)), NOW)
    assert kept is not None
    assert [h["nodeID"] for h in json.loads(kept)["locks"]] == ["worker-2"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{", "not JSON"),
        ('{"metadata":{}}', "without a nodeID"),
        ('{"nodeID":"a","created":"yesterday","TTL":0}', "not an RFC 3339 time"),
        ('{"nodeID":"a","created":"2026-12-07T22:00:00Z","TTL":"1h"}', "nanoseconds"),
        ('{"maxOwners":0,"locks":[]}', "maxOwners"),
    ],
)
def test_a_lock_kured_could_not_have_written_is_refused_by_name(value: str, words: str) -> None:
    with pytest.raises(KuredLockError, match=words):
        parse_lock(value)


def test_the_nodes_in_a_step_are_read_off_their_state_label() -> None:
    def node(name: str, state: str | None) -> dict[str, object]:
        labels = {"gpuctl.dev/driver-state": state} if state else {}
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [node("a", "Done"), node("b", "Loading"), node("c", None), node("d", "Checking")]
    assert nodes_in_a_step(nodes) == ["b", "d"]
    assert nodes_in_a_step([node("a", "Blocked"), node("b", "Pending")]) == []
    assert timedelta(0) < RENEW_AFTER < CLAIM_TTL


def test_while_kured_holds_its_lock_no_node_starts_and_a_node_mid_step_goes_on() -> None:
    settings = RolloutSettings(hold_after_first_node=False)
    pending = node("a", phase=Phase.PENDING, version=TARGET)
    free = decide(rollout([pending], settings=settings))
    assert [a.phase_to for a in free.actions if isinstance(a, PatchNode)] == [Phase.CHECKING]
    held = decide(
        dataclasses.replace(rollout([pending], settings=settings), kured_holder="worker-2")
    )
    assert [a for a in held.actions if isinstance(a, PatchNode)] == []
    assert held.status is not None
    assert held.status["holdKind"] == "KuredRebooting"
    assert held.status["state"] == "Progressing"
    assert "kured holds its reboot lock: worker-2" in held.status["message"]
    # A node already in a step finishes it: the lock gpuctl held until kured took it (its
    # claim ran out) stops new nodes only.
    moving = node("b", phase=Phase.LOADING, version=TARGET, since=1)
    mid_step = decide(
        dataclasses.replace(rollout([pending, moving], settings=settings), kured_holder="worker-2")
    )
    assert mid_step.node_phases["b"] in (Phase.LOADING, Phase.VERIFYING)
    assert mid_step.node_phases["a"] is Phase.PENDING
