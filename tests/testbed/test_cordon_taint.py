"""The cordon taint follows spec.unschedulable and leaves other taints alone."""

from __future__ import annotations

from typing import Any

from testbed.harness.cordon_taint import UNSCHEDULABLE_TAINT, mirrored_taints

OTHER = {"key": "gpu", "value": "busy", "effect": "NoSchedule"}


def node(unschedulable: bool, taints: list[dict[str, str]]) -> dict[str, Any]:
    return {"spec": {"unschedulable": unschedulable, "taints": taints}}


def test_cordoned_node_gains_the_taint_once() -> None:
    assert mirrored_taints(node(True, [OTHER])) == [OTHER, UNSCHEDULABLE_TAINT]
    assert mirrored_taints(node(True, [OTHER, UNSCHEDULABLE_TAINT])) is None


def test_uncordoned_node_loses_only_the_cordon_taint() -> None:
    assert mirrored_taints(node(False, [UNSCHEDULABLE_TAINT, OTHER])) == [OTHER]
    assert mirrored_taints(node(False, [OTHER])) is None
    assert mirrored_taints({"spec": {}}) is None
