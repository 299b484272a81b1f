"""Which GPUDriver, Module and Node changes the reconciler needs to see: not the rollout's own
status writes, nor a Node's heartbeats or rollout steps; a GPUDriver's status and KMM's status
of a Module apart (followed, not reconciled at once)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.filters import (
    FOLLOW_WITHIN_SECONDS,
    reconciled_module_part,
    reconciled_node_part,
    reconciled_part,
)
from coordinator.manager import Coordinator
from gpuctl.common.names import STATE_LABEL, TARGET_LABEL
from tests.support import samples
from tests.support.clock import ManualClock
from tests.support.counting_coordinator import counting_coordinator


def test_a_status_rollout_write_is_not_a_change_for_the_reconciler() -> None:
    before = samples.driver(status={"kmmStatus": "1/1", "rollout": {"progress": "1/5"}})
    after = copy.deepcopy(before)
    after["status"]["rollout"]["progress"] = "2/5"
    after["metadata"]["resourceVersion"] = "8"
    after["metadata"]["managedFields"] = [{"manager": "gpuctl"}]
    assert reconciled_part(before) == reconciled_part(after)


def test_the_rollouts_words_for_the_conditions_are_apart_from_the_rest() -> None:
    """status.rollout's state, hold and message feed the conditions: a change of them is
    followed (coalesced, coordinator.filters.FOLLOW_WITHIN_SECONDS), not a change of the
    GPUDriver's own."""
    before = samples.driver(status={"rollout": {"message": "1 of 5 updated"}})
    after = copy.deepcopy(before)
    after["status"]["rollout"]["message"] = "2 of 5 updated"
    (own_before, words_before), (own_after, words_after) = map(reconciled_part, (before, after))
    assert own_before == own_after
    assert words_before != words_after


def test_kmms_status_of_a_module_is_apart_from_its_spec_and_metadata() -> None:
    """KMM writes a Module's status as each node's load lands: followed (coalesced), while a
    change of its spec or metadata (drift, an owner, a deletion) is reconciled at once."""
    before = samples.module(available=1, desired=5)
    after = samples.module(available=2, desired=5)
    after["metadata"]["resourceVersion"] = "9"
    (own_before, status_before), (own_after, status_after) = map(
        reconciled_module_part, (before, after)
    )
    assert own_before == own_after
    assert status_before != status_after
    drifted = copy.deepcopy(before)
    drifted["spec"]["selector"] = {"someone": "else"}
    deleting = samples.module(available=1, desired=5, deleting_since="2026-12-04T12:00:00Z")
    for changed in (drifted, deleting):
        assert reconciled_module_part(changed)[0] != own_before


CHANGES: list[tuple[str, str, Any]] = [
    ("spec", "kernelModule", {"version": "v2"}),
    ("metadata", "annotations", {"gpuctl.dev/rollout-resumed-version": "v2"}),
    ("metadata", "deletionTimestamp", "2026-11-29T12:00:00Z"),
]


@pytest.mark.parametrize(("part", "key", "value"), CHANGES)
def test_spec_and_metadata_changes_are(part: str, key: str, value: Any) -> None:
    before = samples.driver(status={"kmmStatus": "1/1"})
    after = copy.deepcopy(before)
    after[part][key] = value
    assert reconciled_part(before)[0] != reconciled_part(after)[0]


def test_a_status_write_is_apart_from_spec_and_metadata() -> None:
    """The reconciler's own status write coming back (KMM's count of loaded nodes, say) is
    followed, not reconciled at once: it changes the second part only."""
    before = samples.driver(status={"kmmStatus": "1/5"})
    after = copy.deepcopy(before)
    after["status"]["kmmStatus"] = "2/5"
    after["metadata"]["resourceVersion"] = "12"
    (own_before, followed_before), (own_after, followed_after) = map(
        reconciled_part, (before, after)
    )
    assert own_before == own_after
    assert followed_before != followed_after


def _queued_now(coordinator: Coordinator) -> str | None:
    return coordinator.queue.get(0.0)


def test_the_driver_handler_follows_a_status_write_and_reconciles_a_spec_change_at_once() -> None:
    """On a real Coordinator's queue: a new GPUDriver is reconciled at once; its status
    written (the reconciler's own write coming back) is reconciled within
    FOLLOW_WITHIN_SECONDS, not at once; a spec change at once again."""
    clock = ManualClock()
    coordinator = counting_coordinator(clock)
    driver = samples.driver(status={"kmmStatus": "0/5"})
    name = driver["metadata"]["name"]
    coordinator._on_driver("ADDED", copy.deepcopy(driver))
    assert _queued_now(coordinator) == name
    driver["status"]["kmmStatus"] = "1/5"
    coordinator._on_driver("MODIFIED", copy.deepcopy(driver))
    assert _queued_now(coordinator) is None
    assert coordinator.reconciles_asked == 1  # the ADDED's: a status write ends no conflict
    clock.advance(FOLLOW_WITHIN_SECONDS)
    assert _queued_now(coordinator) == name
    coordinator._on_driver("MODIFIED", copy.deepcopy(driver))  # the same again: nothing
    clock.advance(FOLLOW_WITHIN_SECONDS)
    assert _queued_now(coordinator) is None
    driver["spec"]["kernelModule"] = {"version": "v2"}
    coordinator._on_driver("MODIFIED", copy.deepcopy(driver))
    assert _queued_now(coordinator) == name
    assert coordinator.reconciles_asked == 2


def _gpu_node() -> dict[str, Any]:
    node = samples.node("n1", {"kubernetes.io/arch": "amd64"}, kernel="6.8.0-45-generic")
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return node


NODE_CHANGES: list[tuple[str, str, Any]] = [
    ("labels", TARGET_LABEL, "gpu-policy"),
    ("labels", "kmm.node.kubernetes.io/ns.m.ready", ""),
    ("nodeInfo", "kernelVersion", "7.0.0-1-generic"),
]


@pytest.mark.parametrize(("where", "key", "value"), NODE_CHANGES)
def test_a_nodes_labels_and_kernel_are_changes(where: str, key: str, value: str) -> None:
    before = _gpu_node()
    after = copy.deepcopy(before)
    part = after["metadata"] if where == "labels" else after["status"]
    part[where][key] = value
    assert reconciled_node_part(before) != reconciled_node_part(after)


def test_a_nodes_heartbeat_is_not() -> None:
    before = _gpu_node()
    after = copy.deepcopy(before)
    after["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-29T12:00:00Z"
    after["metadata"]["resourceVersion"] = "9"
    assert reconciled_node_part(before) == reconciled_node_part(after)


def test_a_nodes_rollout_step_is_not() -> None:
    """The rollout's state label changes six times per node in every rollout; the reconciler
    does not read it (and a nodeSelector on it is refused by validation)."""
    before = _gpu_node()
    before["metadata"]["labels"][STATE_LABEL] = "Checking"
    after = copy.deepcopy(before)
    after["metadata"]["labels"][STATE_LABEL] = "Draining"
    after["metadata"]["annotations"] = {"gpuctl.dev/rollout-reason": "evicting GPU pods"}
    assert reconciled_node_part(before) == reconciled_node_part(after)
