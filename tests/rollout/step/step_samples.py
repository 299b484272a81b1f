"""What the tests of each phase's step share (tests/rollout/step/test_checking.py,
test_draining.py, test_preparing.py, test_loading.py, test_verifying.py, test_writes.py): a GPU
pod, the one Node write a step makes, settings, a node in Verifying with its pass records, and
a driver image."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.input.facts import GpuPod, NodeFacts
from gpuctl.rollout.input.records import BoundFunction, encode_bound, encode_vfs
from gpuctl.rollout.input.settings import RolloutSettings
from tests.support.rollout_samples import PF, loaded_labels, node

POD = GpuPod("ml", "trainer-0")

# The image a node is loaded from (srcversion verification of config-only changes).
IMAGE = "registry.example.com/xe:1"


def only_patch(actions: Sequence[object]) -> PatchNode:
    assert len(actions) == 1, actions
    patch = actions[0]
    assert isinstance(patch, PatchNode)
    return patch


def settings(**kwargs: Any) -> RolloutSettings:
    return dataclasses.replace(RolloutSettings(hold_after_first_node=False), **kwargs)


RECORDED = {
    names.BOUND_BEFORE: encode_bound([BoundFunction(PF, "xe")]),
    names.VFS_BEFORE: encode_vfs({PF: 2}),
    names.SRCVERSION_BEFORE: "OLDSRC",
    names.CORDONED_BY_GPUCTL: "true",
}


def verifying(*, since: float = 5, annotations: dict[str, str] | None = None) -> NodeFacts:
    return node(
        phase=Phase.VERIFYING,
        since=since,
        labels=loaded_labels(),
        unschedulable=True,
        annotations={**RECORDED, **(annotations or {})},
    )
