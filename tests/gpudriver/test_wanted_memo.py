"""WantedMemo: the same answers as wanted_nodes, each node's kept while its Node object, its
resourceVersion and the spec's targeting are the same."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

from gpuctl.gpudriver.targeting import wanted_nodes
from gpuctl.gpudriver.wanted_memo import WantedMemo

SPEC: dict[str, Any] = {
    "nodeSelector": {"gpu": "yes"},
    "tolerateAllTaints": False,
    "kernelModule": {"kernelMappings": [{"regexp": r"^6\.8\.", "containerImage": "r/xe:a"}]},
}


def node(name: str, version: int, *, kernel: str = "6.8.0-60-generic", **labels: str) -> Any:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(version),
            "labels": {"kubernetes.io/arch": "amd64", "gpu": "yes", **labels},
        },
        "spec": {},
        "status": {"nodeInfo": {"kernelVersion": kernel}},
    }


def fleet(count: int) -> list[Any]:
    return [node(f"n{i:03}", 1) for i in range(count)]


def test_a_second_ask_on_the_same_objects_reuses_every_answer() -> None:
    nodes, memo = fleet(20), WantedMemo()
    first = memo.wanted(SPEC, nodes)
    assert first == wanted_nodes(SPEC, nodes) == frozenset(n["metadata"]["name"] for n in nodes)
    assert (memo.asked, memo.reused) == (20, 0)
    assert memo.wanted(SPEC, nodes) == first
    assert (memo.asked, memo.reused) == (20, 20)


def test_a_replaced_node_is_asked_afresh() -> None:
    nodes, memo = fleet(5), WantedMemo()
    memo.wanted(SPEC, nodes)
    nodes[2] = node("n002", 2, gpu="no")  # the watch's new object: it left the selector
    assert memo.wanted(SPEC, nodes) == frozenset({"n000", "n001", "n003", "n004"})
    assert memo.asked == 6


def test_the_same_object_changed_in_place_is_asked_afresh_by_its_resource_version() -> None:
    nodes, memo = fleet(3), WantedMemo()
    memo.wanted(SPEC, nodes)
    nodes[0]["status"]["nodeInfo"]["kernelVersion"] = "5.15.0-1-generic"
    nodes[0]["metadata"]["resourceVersion"] = "2"
    assert memo.wanted(SPEC, nodes) == frozenset({"n001", "n002"})


def test_a_node_without_a_resource_version_is_never_kept() -> None:
    nodes, memo = fleet(2), WantedMemo()
    del nodes[0]["metadata"]["resourceVersion"]
    memo.wanted(SPEC, nodes)
    memo.wanted(SPEC, nodes)
    assert (memo.asked, memo.reused) == (3, 1)


def test_a_changed_selector_tolerations_or_mapping_asks_every_node_afresh() -> None:
    nodes, memo = fleet(4), WantedMemo()
    nodes[1]["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    assert memo.wanted(SPEC, nodes) == frozenset({"n000", "n002", "n003"})
    tolerant = {**SPEC, "tolerations": [{"key": "maintenance", "operator": "Exists"}]}
    assert memo.wanted(tolerant, nodes) == frozenset({"n000", "n001", "n002", "n003"})
    other_kernel = copy.deepcopy(tolerant)
    other_kernel["kernelModule"]["kernelMappings"][0]["regexp"] = r"^7\."
    assert memo.wanted(other_kernel, nodes) == frozenset()
    assert memo.wanted({**tolerant, "nodeSelector": {"gpu": "no"}}, nodes) == frozenset()
    assert memo.wanted({"nodeSelector": {"gpu": "yes"}}, nodes) == frozenset()  # no module
    assert (memo.asked, memo.reused) == (20, 0)


def test_nodes_no_longer_listed_are_forgotten() -> None:
    nodes, memo = fleet(10), WantedMemo()
    memo.wanted(SPEC, nodes)
    memo.wanted(SPEC, nodes[:3])
    memo.wanted(SPEC, nodes)
    assert (memo.asked, memo.reused) == (17, 6)


def test_random_changes_answer_as_wanted_nodes_does() -> None:
    rng = random.Random(20261205)  # noqa: S311 - a reproducible fleet, not secrecy
    nodes, memo = fleet(60), WantedMemo()
    names = itertools.count(len(nodes))
    spec = copy.deepcopy(SPEC)
    for step in range(400):
        index = rng.randrange(len(nodes))
        change = rng.random()
        if change < 0.5:  # the watch replaces one node's object at a new resourceVersion
            labels = {"gpu": rng.choice(["yes", "no"])}
            kernel = rng.choice(["6.8.0-60-generic", "6.11.0-1-oem", "5.15.0-1-generic"])
            name = nodes[index]["metadata"]["name"]
            nodes[index] = node(name, step + 2, kernel=kernel, **labels)
            if rng.random() < 0.3:
                nodes[index]["spec"]["taints"] = [{"key": "k", "effect": "NoExecute"}]
        elif change < 0.6:  # the spec's targeting changes
            spec["nodeSelector"] = {"gpu": rng.choice(["yes", "no"])}
            spec["tolerateAllTaints"] = rng.random() < 0.5
        elif change < 0.7:  # a node leaves the list, or one comes back
            if len(nodes) > 10:
                nodes.pop(index)
            else:
                nodes.append(node(f"n{next(names):03}", step + 2))
        listed = rng.sample(nodes, len(nodes))  # a cache lists in no particular order
        assert memo.wanted(spec, listed) == wanted_nodes(spec, listed), step
    assert memo.reused > memo.asked
