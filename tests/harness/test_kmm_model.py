"""KMM's per-node decisions as the emulator models them (pure functions, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import kmm_model as model


def module(version: str = "", **spec: Any) -> model.ModuleView:
    container: dict[str, Any] = {
        "kernelMappings": [
            {"literal": "6.8.0-45-generic", "containerImage": "img:literal"},
            {"regexp": r"^6\.1[0-9]\."},
        ],
        "containerImage": "img:default",
    }
    if version:
        container["version"] = version
    body = {"selector": {"gpu": "true"}, "moduleLoader": {"container": container}, **spec}
    return model.ModuleView.from_object(
        {"metadata": {"name": "xe", "namespace": "ns"}, "spec": body}
    )


def node(
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    kernel: str = "6.8.0-45-generic",
) -> model.NodeView:
    return model.NodeView.from_object(
        {
            "metadata": {"name": "n1", "labels": {"gpu": "true", **(labels or {})}},
            "spec": {"taints": taints or []},
            "status": {"nodeInfo": {"kernelVersion": kernel}},
        }
    )


def test_labels_are_kmms() -> None:
    assert model.ready_label("ns", "xe") == "kmm.node.kubernetes.io/ns.xe.ready"
    assert model.version_ready_label("ns", "xe") == "kmm.node.kubernetes.io/ns.xe.version.ready"
    assert model.version_module_label("ns", "xe") == "kmm.node.kubernetes.io/version-module.ns.xe"


def test_targeting_needs_selector_and_tolerated_scheduling_taints() -> None:
    cordoned = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    assert model.is_targeted(module(), node())
    assert not model.is_targeted(module(), node(labels={"gpu": "false"}))
    assert not model.is_targeted(module(), node(taints=[cordoned]))
    assert model.is_targeted(module(), node(taints=[{"key": "x", "effect": "PreferNoSchedule"}]))
    tolerant = module(tolerations=[{"key": cordoned["key"], "operator": "Exists"}])
    assert model.is_targeted(tolerant, node(taints=[cordoned]))


def test_kernel_mapping_literal_regexp_and_trailing_plus() -> None:
    mapping = model.kernel_mapping(module(), "6.8.0-45-generic+")
    assert mapping is not None
    assert mapping.container_image == "img:literal"
    mapping = model.kernel_mapping(module(), "6.12.3-arch1")
    assert mapping is not None
    assert mapping.container_image == "img:default"
    assert model.kernel_mapping(module(), "5.15.0") is None


@pytest.mark.parametrize(
    ("label", "worker", "loaded", "expected"),
    [
        (None, None, None, None),
        ("2", None, None, "2"),
        ("2", None, model.Loaded("1", "i"), None),
        ("2", "1", model.Loaded("1", "i"), None),
        ("2", "2", model.Loaded("2", "i"), "2"),
        (None, "1", model.Loaded("1", "i"), None),
    ],
)
def test_worker_label_unloads_before_following_a_new_version(
    label: str | None, worker: str | None, loaded: model.Loaded | None, expected: str | None
) -> None:
    assert model.next_worker_label(label, worker, loaded) == expected


def test_decisions_follow_the_version_rules() -> None:
    unversioned = model.decide(module(), node(), None)
    assert unversioned.load == model.Loaded("", "img:literal")
    assert model.decide(module("2"), node(), None) == model.UNLOAD
    assert model.decide(module("2"), node(), "1") == model.KEEP
    assert model.decide(module("2"), node(), "2").load == model.Loaded("2", "img:literal")
    assert model.decide(module("2"), node(kernel="5.4.0"), "2") == model.UNLOAD


def test_readiness_labels_and_status_counts() -> None:
    view = module("2")
    assert model.readiness_labels(view, model.Loaded("2", "i")) == {
        model.ready_label("ns", "xe"): "",
        model.version_ready_label("ns", "xe"): "2",
    }
    assert set(model.readiness_labels(view, None).values()) == {None}
    nodes = [
        model.NodeView("a", {"gpu": "true"}, (), "6.8.0-45-generic"),
        model.NodeView("b", {"gpu": "true"}, (), "6.8.0-45-generic"),
        model.NodeView("c", {"gpu": "false"}, (), "6.8.0-45-generic"),
    ]
    want = model.Loaded("2", "img:literal")
    decisions = {"a": model.Decision(load=want), "b": model.KEEP, "c": model.UNLOAD}
    loaded = {"a": None, "b": model.Loaded("1", "img:old"), "c": None}
    assert model.loader_status(view, nodes, decisions, loaded) == model.LoaderStatus(2, 2, 1)
