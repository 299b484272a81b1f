"""Which GPUDriver changes the reconciler needs to see: not the rollout's own status writes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.manager import _reconciled_part
from tests.support import samples


def test_a_status_rollout_write_is_not_a_change_for_the_reconciler() -> None:
    before = samples.driver(status={"kmmStatus": "1/1", "rollout": {"progress": "1/5"}})
    after = copy.deepcopy(before)
    after["status"]["rollout"]["progress"] = "2/5"
    after["metadata"]["resourceVersion"] = "8"
    after["metadata"]["managedFields"] = [{"manager": "gpuctl"}]
    assert _reconciled_part(before) == _reconciled_part(after)


CHANGES: list[tuple[str, str, Any]] = [
    ("spec", "kernelModule", {"version": "v2"}),
    ("status", "kmmStatus", "0/1"),
    ("metadata", "annotations", {"gpuctl.dev/rollout-resumed-version": "v2"}),
    ("metadata", "deletionTimestamp", "2026-11-29T12:00:00Z"),
]


@pytest.mark.parametrize(("part", "key", "value"), CHANGES)
def test_spec_status_and_metadata_changes_are(part: str, key: str, value: Any) -> None:
    before = samples.driver(status={"kmmStatus": "1/1"})
    after = copy.deepcopy(before)
    after[part][key] = value
    assert _reconciled_part(before) != _reconciled_part(after)
