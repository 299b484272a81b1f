"""Which taints keep a driver from a node (gpuctl.gpudriver.tolerations), as Kubernetes'
Toleration.ToleratesTaint and KMM's IsNodeSchedulable decide it; a node with a taint the
GPUDriver leaves untolerated is not one it wants (gpuctl.gpudriver.targeting), while the
Module tolerates every taint so KMM never drops a node for one."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.gpudriver.targeting import wanted_nodes, wants_node
from gpuctl.gpudriver.tolerations import (
    CORDON_TOLERATION,
    module_tolerations,
    tolerates,
    untolerated,
    wanted_tolerations,
)
from tests.support import samples

MAINT = {"key": "example.com/maint", "value": "true", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, MAINT, True),
        ({"key": "example.com/maint", "operator": "Exists"}, MAINT, True),
        ({"key": "example.com/maint", "value": "true"}, MAINT, True),  # Equal by default
        ({"key": "example.com/maint", "operator": "Equal", "value": "no"}, MAINT, False),
        ({"key": "example.com/maint", "operator": "Exists", "effect": "NoSchedule"}, MAINT, False),
        ({"key": "other", "operator": "Exists"}, MAINT, False),
        ({"value": "true"}, MAINT, True),  # no key, Equal: the value alone
        ({"key": "example.com/maint", "operator": "Lt", "value": "true"}, MAINT, False),
    ],
)
def test_tolerates_as_kubernetes_does(
    toleration: dict[str, Any], taint: dict[str, Any], expected: bool
) -> None:
    assert tolerates(toleration, taint) is expected


def test_only_no_schedule_and_no_execute_taints_keep_kmm_away() -> None:
    prefer = {"key": "x", "effect": "PreferNoSchedule"}
    assert untolerated([prefer, MAINT], []) == [MAINT]
    assert untolerated([MAINT], [{"operator": "Exists"}]) == []


def test_the_module_tolerates_every_taint_even_when_the_gpudriver_narrows_its_own() -> None:
    assert module_tolerations({}) == [{"operator": "Exists"}]
    user = [{"key": "gpu", "operator": "Exists"}]
    narrowed = {"tolerateAllTaints": False, "tolerations": user}
    assert module_tolerations(narrowed) == [{"operator": "Exists"}, *user]
    assert untolerated([MAINT], module_tolerations(narrowed)) == []
    assert wanted_tolerations({}) == [{"operator": "Exists"}]
    assert wanted_tolerations(narrowed) == [*user, CORDON_TOLERATION]
    assert untolerated([MAINT], wanted_tolerations(narrowed)) == [MAINT]


def tainted_node(*taints: dict[str, Any]) -> dict[str, Any]:
    node = samples.node("n1", {"kubernetes.io/arch": "amd64"}, kernel="6.8.0-60-generic")
    node["spec"] = {"taints": list(taints)}
    return node


def test_a_node_with_a_taint_the_gpudriver_leaves_untolerated_is_not_wanted() -> None:
    spec = samples.minimal_spec()
    spec.pop("nodeSelector", None)
    node = tainted_node(MAINT)
    assert wants_node(spec, node)
    assert wanted_nodes(spec, [node]) == {"n1"}
    narrowed = {**spec, "tolerateAllTaints": False}
    assert not wants_node(narrowed, node)
    assert wanted_nodes(narrowed, [node]) == frozenset()
    cordoned = tainted_node({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    assert wants_node(narrowed, cordoned)
    tolerated = {**narrowed, "tolerations": [{"key": "example.com/maint", "operator": "Exists"}]}
    assert wants_node(tolerated, node)
