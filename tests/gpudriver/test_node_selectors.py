"""Label selectors, core/v1 NodeSelectors, and overlap of two GPUDrivers' selectors."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common.nodes import node_selector_matches
from gpuctl.gpudriver.node_selectors import nodes_matching, selectors_can_overlap
from tests.support.samples import node


def test_equality_selector_selects_nodes_with_every_label() -> None:
    nodes = [
        node("a", {"gpu": "true", "kubernetes.io/arch": "amd64"}),
        node("b", {"gpu": "true"}),
        node("c", {"gpu": "false", "kubernetes.io/arch": "amd64"}),
    ]
    assert nodes_matching({"gpu": "true", "kubernetes.io/arch": "amd64"}, nodes) == {"a"}
    assert nodes_matching({}, nodes) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ({"x": "1"}, {"x": "1"}, True),
        ({"x": "1"}, {"y": "2"}, True),
        ({"x": "1"}, {"x": "2"}, False),
        ({"x": "1", "z": "3"}, {"z": "4"}, False),
        ({}, {"x": "1"}, True),
    ],
)
def test_selector_overlap(a: dict[str, str], b: dict[str, str], overlap: bool) -> None:
    assert selectors_can_overlap(a, b) is overlap
    assert selectors_can_overlap(b, a) is overlap


def _term(**parts: Any) -> dict[str, Any]:
    return {"nodeSelectorTerms": [parts]}


def test_node_selector_by_name_field() -> None:
    sel = _term(matchFields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}])
    assert node_selector_matches(sel, node("n1"))
    assert not node_selector_matches(sel, node("n2"))


@pytest.mark.parametrize(
    ("operator", "values", "labels", "expected"),
    [
        ("In", ["a"], {"k": "a"}, True),
        ("In", ["a"], {"k": "b"}, False),
        ("NotIn", ["a"], {}, True),
        ("NotIn", ["a"], {"k": "a"}, False),
        ("Exists", [], {"k": ""}, True),
        ("Exists", [], {}, False),
        ("DoesNotExist", [], {}, True),
        ("Gt", ["3"], {"k": "4"}, True),
        ("Gt", ["3"], {"k": "3"}, False),
        ("Lt", ["3"], {"k": "2"}, True),
        ("Lt", ["3"], {"k": "x"}, False),
        ("Bogus", ["a"], {"k": "a"}, False),
    ],
)
def test_node_selector_label_operators(
    operator: str, values: list[str], labels: dict[str, str], expected: bool
) -> None:
    sel = _term(matchExpressions=[{"key": "k", "operator": operator, "values": values}])
    assert node_selector_matches(sel, node("n", labels)) is expected


def test_terms_are_ored_and_empty_term_matches_nothing() -> None:
    one = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    two = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    sel = {"nodeSelectorTerms": [one, two]}
    assert node_selector_matches(sel, node("n2"))
    assert not node_selector_matches({"nodeSelectorTerms": [{}]}, node("n1"))
