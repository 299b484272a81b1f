"""A node's facts are given again only while everything they are made of is the same
(gpuctl/rollout/input/memo.py), and a pass with the memo decides on exactly what a pass without it
would."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.rollout_pass import fleet, pass_input
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import kmm_version
from gpuctl.gpudriver.wanted_memo import WantedMemo
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import INSPECT, CallState, GpuPod, node_facts
from gpuctl.rollout.input.memo import NodeFactsMemo

SPEC: dict[str, Any] = {
    "kernelModule": {"kernelMappings": [{"regexp": r"^6\.8\.", "containerImage": "r/xe:2"}]},
    "rollout": {"maxUnavailable": 2, "holdAfterFirstNode": False},
}
TARGET = kmm_version(SPEC)


def a_node(
    name: str, version: str, *, state: str = "", unschedulable: bool = False
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64"}
    annotations = {}
    if state:
        labels[names.STATE_LABEL] = state
        annotations = {
            names.GPUDRIVER: "gpu",
            names.STATE_VERSION: TARGET,
            names.SINCE: "2026-12-04T11:59:00Z",
        }
    return {
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"unschedulable": unschedulable},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kernelVersion": "6.8.0-60-generic", "bootID": "boot-1"},
        },
    }


def test_the_same_node_and_inputs_give_the_same_facts_back() -> None:
    memo = NodeFactsMemo()
    node = a_node("n1", "10")
    first = memo.node_facts(node, wanted=True, claims=("ns/claim",))
    again = memo.node_facts(node, wanted=True, claims=("ns/claim",))
    assert again is first
    assert (memo.built, memo.reused) == (1, 1)


def test_a_new_resource_version_builds_the_new_nodes_facts() -> None:
    memo = NodeFactsMemo()
    memo.node_facts(a_node("n1", "10"))
    changed = memo.node_facts(a_node("n1", "11", state="Checking", unschedulable=True))
    assert changed.resource_version == "11"
    assert changed.labels[names.STATE_LABEL] == "Checking"
    assert changed.unschedulable
    assert memo.reused == 0


def test_another_object_at_the_same_resource_version_is_not_trusted_to_be_the_same() -> None:
    """A copy (our own write's answer, a test's fake) may differ though its version does not:
    only the very object the facts were made of is taken as unchanged."""
    memo = NodeFactsMemo()
    memo.node_facts(a_node("n1", "10"))
    copy = a_node("n1", "10", state="Draining")
    assert memo.node_facts(copy).labels[names.STATE_LABEL] == "Draining"
    assert memo.reused == 0


def test_a_node_without_a_resource_version_is_always_built() -> None:
    memo = NodeFactsMemo()
    node = a_node("n1", "")
    memo.node_facts(node)
    memo.node_facts(node)
    assert (memo.built, memo.reused) == (2, 0)


def test_any_other_input_that_changed_builds_afresh() -> None:
    memo = NodeFactsMemo()
    node = a_node("n1", "10")
    call = CallState(kind=INSPECT, attempt="a", started_at=100.0)
    base: dict[str, Any] = {
        "gpu_pods": (GpuPod("ml", "train-0"),),
        "calls": {INSPECT: call},
        "wanted": True,
        "target_image": "r/xe:2",
        "image_state": "Exists",
    }
    memo.node_facts(node, **base)
    changes: dict[str, Any] = {
        "gpu_pods": (),
        "calls": {INSPECT: dataclasses.replace(call, finished_at=101.0)},
        "wanted": False,
        "target_image": "r/xe:3",
        "image_state": "DoesNotExist",
        "claims_unknown": "ResourceClaims not listed yet",
        "kmm_activity": "KMM's worker Pod is pulling",
        "unfinished_workers": ("worker-1",),
    }
    for key, value in changes.items():
        facts = memo.node_facts(node, **{**base, key: value})
        assert facts == node_facts(node, **{**base, key: value}), key
        memo.node_facts(node, **base)  # back to the base: built again, not the changed one
    assert memo.reused == 0


def test_nodes_a_pass_no_longer_looks_at_are_forgotten() -> None:
    memo = NodeFactsMemo()
    one, two = a_node("n1", "10"), a_node("n2", "10")
    memo.node_facts(one)
    memo.node_facts(two)
    memo.keep_only(["n2"])
    memo.node_facts(one)
    memo.node_facts(two)
    assert (memo.built, memo.reused) == (3, 1)


def test_a_pass_with_the_memos_decides_on_what_a_pass_without_them_would() -> None:
    """Passes over a busy fleet (bench.rollout_pass: GPU daemons and workload pods, pods read
    afresh each pass) where one node moves a step between them: the input with the memos
    (facts and wanted answers kept) equals a fresh one's, node for node, and so does the
    decision."""
    count, passes = 100, 12
    kept, fresh, memo, wanted = fleet(count), fleet(count), NodeFactsMemo(), WantedMemo()
    for _ in range(passes):
        with_memo, without = pass_input(kept, memo, wanted), pass_input(fresh, None, None)
        assert list(with_memo.nodes) == list(without.nodes)
        assert decide(with_memo) == decide(without)
    # Each pass after the first built and asked only the node that moved.
    assert memo.built == wanted.asked == count + passes - 1
    assert memo.reused == wanted.reused == (passes - 1) * (count - 1)
