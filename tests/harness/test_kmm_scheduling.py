"""The Module reconciler's rules (M1-M8) on plain data."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import kmm_scheduling as sched
from tests.harness.kmm_model import KernelMapping, ModuleView, NodeView, SpecEntry, StatusEntry
from tests.harness.kmm_safety import Cause

KERNEL = "6.8.0-45-generic"
WORKER = sched.worker_version_label("ns", "xe")


def module(version: str = "", **spec: Any) -> ModuleView:
    container: dict[str, Any] = {
        "kernelMappings": [
            {"literal": KERNEL, "containerImage": "img:literal"},
            {"regexp": r"6\.1[0-9]\."},
        ],
        "containerImage": "img:default",
        "modprobe": {"moduleName": "xe"},
    }
    if version:
        container["version"] = version
    container.update(spec.pop("container", {}))
    body = {"selector": {"gpu": "true"}, "moduleLoader": {"container": container}, **spec}
    return ModuleView.from_object({"metadata": {"name": "xe", "namespace": "ns"}, "spec": body})


def node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    kernel: str = KERNEL,
) -> NodeView:
    return NodeView(name, {"gpu": "true", **(labels or {})}, tuple(taints or ()), kernel)


CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def test_selector_is_exact_key_value_equality() -> None:
    assert sched.is_targeted(module(), node())
    assert not sched.is_targeted(module(), node(labels={"gpu": "True"}))
    assert not sched.is_targeted(module(), NodeView("n", {}, (), KERNEL))
    assert sched.is_targeted(module(selector={}), NodeView("n", {}, (), KERNEL))


@pytest.mark.parametrize(
    ("taint", "targeted"),
    [
        (CORDON, False),
        ({"key": "x", "effect": "NoExecute"}, False),
        ({"key": "x", "effect": "PreferNoSchedule"}, True),
        # M3: KMM adds its own pressure tolerations.
        ({"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}, True),
        ({"key": "node.kubernetes.io/memory-pressure", "effect": "NoExecute"}, False),
    ],
)
def test_untolerated_no_schedule_and_no_execute_taints_untarget(
    taint: dict[str, str], targeted: bool
) -> None:
    assert sched.is_targeted(module(), node(taints=[taint])) is targeted


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": CORDON["key"], "operator": "Exists"}, True),
        ({"key": CORDON["key"], "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
        ({"key": CORDON["key"], "value": ""}, True),
        ({"key": CORDON["key"], "operator": "Equal", "value": "x"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_follow_kubernetes_tolerates_taint(
    toleration: dict[str, str], tolerated: bool
) -> None:
    view = module(tolerations=[toleration])
    assert sched.is_targeted(view, node(taints=[CORDON])) is tolerated


def test_kernel_mapping_literal_then_regexp_in_list_order_unanchored() -> None:
    mappings = (
        KernelMapping(regexp="generic", container_image="img:first-regexp"),
        KernelMapping(literal=KERNEL, container_image="img:literal"),
    )
    # List order wins: the earlier regexp matches (anywhere in the kernel string).
    assert sched.find_kernel_mapping(mappings, KERNEL) == mappings[0]
    assert sched.find_kernel_mapping(mappings[::-1], KERNEL) == mappings[1]
    assert sched.find_kernel_mapping(mappings, "5.15.0-1") is None
    with pytest.raises(sched.KernelMappingError):
        sched.find_kernel_mapping((KernelMapping(regexp="("),), KERNEL)


def test_the_kernel_loses_one_trailing_plus() -> None:
    assert sched.node_kernel(node(kernel=f"{KERNEL}++")) == f"{KERNEL}+"
    decision = sched.schedule_targeted_node(module(), node(kernel=f"{KERNEL}+"), False)
    assert decision.entry is not None
    assert decision.entry.config.container_image == "img:literal"
    assert decision.entry.config.kernel_version == KERNEL


def test_spec_entry_merges_mapping_and_container_as_kmm_does() -> None:
    view = module(
        "2",
        tolerations=[{"key": "k", "operator": "Exists"}],
        imageRepoSecret={"name": "pull"},
        container={
            "inTreeModulesToRemove": ["xe"],
            "registryTLS": {"insecureSkipTLSVerify": True},
            "imagePullPolicy": "Always",
            "kernelMappings": [
                {"regexp": ".", "containerImage": "reg/${MOD_NAMESPACE}/${MOD_NAME}:$KERNEL_XYZ"}
            ],
        },
    )
    entry = sched.spec_entry(view, view.kernel_mappings[0], KERNEL)
    assert entry.config.container_image == "reg/ns/xe:6.8.0"
    assert entry.config.in_tree_modules_to_remove == ("xe",)
    assert entry.config.insecure_pull
    assert entry.config.image_pull_policy == "Always"
    assert entry.version == "2"
    assert entry.tolerations == ({"key": "k", "operator": "Exists"}, *sched.INTERNAL_TOLERATIONS)
    assert (entry.image_repo_secret, entry.service_account) == ("pull", "default")
    # A mapping's list replaces the container's; a deprecated single name replaces both.
    own = KernelMapping(regexp=".", in_tree_modules_to_remove=("i915",), registry_tls={})
    assert sched.spec_entry(view, own, KERNEL).config.in_tree_modules_to_remove == ("i915",)
    assert not sched.spec_entry(view, own, KERNEL).config.insecure_pull
    single = KernelMapping(
        regexp=".", in_tree_modules_to_remove=("i915",), in_tree_module_to_remove="a"
    )
    assert sched.spec_entry(view, single, KERNEL).config.in_tree_modules_to_remove == ("a",)


def test_a_kernel_with_fewer_than_three_parts_leaves_the_nmc_alone() -> None:
    view = module(container={"kernelMappings": [{"regexp": ".", "containerImage": "i:1"}]})
    assert sched.schedule(view, [node(kernel="6.8")], {"n1"}) == {}


@pytest.mark.parametrize(
    ("version", "label", "configured", "expected"),
    [
        ("", None, False, sched.Action.ADD),
        ("2", "2", False, sched.Action.ADD),
        ("2", "1", True, sched.Action.NONE),  # the previous version keeps running
        ("2", None, True, sched.Action.DELETE),
        ("2", None, False, sched.Action.DELETE),
    ],
)
def test_worker_version_label_decides_add_keep_or_delete(
    version: str, label: str | None, configured: bool, expected: sched.Action
) -> None:
    labels = {} if label is None else {WORKER: label}
    decision = sched.schedule_targeted_node(module(version), node(labels=labels), configured)
    assert decision.action is expected
    if expected is sched.Action.DELETE:
        assert decision.cause is Cause.VERSION_CHANGE


def test_no_kernel_mapping_deletes_only_where_configured() -> None:
    old_kernel = node(kernel="5.15.0-1-generic")
    assert sched.schedule_targeted_node(module(), old_kernel, True) == sched.Scheduling(
        sched.Action.DELETE, cause=Cause.NO_KERNEL_MAPPING
    )
    assert sched.schedule_targeted_node(module(), old_kernel, False) == sched.NOTHING


def test_configured_nodes_that_are_no_longer_targets_are_deleted_with_their_cause() -> None:
    nodes = [
        node("kept"),
        node("dropped", labels={"gpu": "false"}),
        node("tainted", taints=[CORDON]),
        node("soft", taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
    ]
    result = sched.schedule(module(), nodes, {"kept", "dropped", "tainted", "soft", "gone"})
    assert result["kept"].action is sched.Action.ADD
    assert result["soft"].action is sched.Action.ADD
    assert result["dropped"] == sched.Scheduling(sched.Action.DELETE, cause=Cause.UNTARGETED)
    assert result["tainted"] == sched.Scheduling(sched.Action.DELETE, cause=Cause.TAINT)
    assert result["gone"] == sched.Scheduling(sched.Action.DELETE, cause=Cause.UNTARGETED)


def test_loader_status_counts_and_omits_zeros() -> None:
    view = module()
    entry = sched.spec_entry(view, view.kernel_mappings[0], KERNEL)
    loaded = StatusEntry(entry.config)
    old = StatusEntry(sched.spec_entry(view, view.kernel_mappings[1], "6.12.1-x").config)
    entries: list[tuple[SpecEntry, StatusEntry | None]] = [
        (entry, loaded),
        (entry, old),
        (entry, None),
    ]
    assert sched.loader_status(4, entries) == {
        "nodesMatchingSelectorNumber": 4,
        "desiredNumber": 3,
        "availableNumber": 1,
    }
    assert sched.loader_status(2, []) == {"nodesMatchingSelectorNumber": 2}
