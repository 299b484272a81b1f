"""The test-side KMM follows Modules, Nodes and version labels the way KMM does, on a real API,
and records every unload it does (with whether the node was busy then)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from tests.harness import kmm_model
from tests.harness.cordon_taint import UNSCHEDULABLE_TAINT, CordonTaintMirror
from tests.harness.kmm_emulator import KmmEmulator
from tests.harness.kmm_model import Loaded
from tests.harness.kmm_safety import Cause, UnloadAttempt
from tests.harness.kmm_scheduling import worker_version_label
from tests.harness.kmm_versions import schedule_version_label
from tests.harness.waiting import wait_until
from tests.support.fixture_types import MakeNode

pytestmark = pytest.mark.integration

SELECTOR = {"gpuctl.dev/test-gpu": "true"}


def versioned_module(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
        "kind": "Module",
        "metadata": {"name": name},
        "spec": {
            "selector": SELECTOR,
            "moduleLoader": {
                "container": {
                    "version": version,
                    "modprobe": {"moduleName": "xe"},
                    "kernelMappings": [
                        {
                            "regexp": r"^6\.8\..*$",
                            "containerImage": f"registry.invalid/xe:{version}",
                        }
                    ],
                }
            },
        },
    }


class View:
    """Reads what a coordinator would read: node labels and the Module's status."""

    def __init__(self, api_client: Any, namespace: str, module: str) -> None:
        self.core: Any = k8s.CoreV1Api(api_client)
        self.custom: Any = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.module = module

    def labels(self, node: str) -> dict[str, str]:
        labels: dict[str, str] = self.core.read_node(node).metadata.labels or {}
        return labels

    def version_ready(self, node: str) -> str | None:
        return self.labels(node).get(kmm_model.version_ready_label(self.namespace, self.module))

    def ready(self, node: str) -> bool:
        return kmm_model.ready_label(self.namespace, self.module) in self.labels(node)

    def settled_at(self, node: str, version: str) -> bool:
        """KMM is done with this node at ``version``: loaded, and its worker and schedule
        labels (V1) follow."""
        labels = self.labels(node)
        return (
            labels.get(kmm_model.version_ready_label(self.namespace, self.module)) == version
            and labels.get(worker_version_label(self.namespace, self.module)) == version
            and labels.get(schedule_version_label(self.namespace, self.module)) == version
        )

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(
            kmm_model.GROUP, kmm_model.VERSION, self.namespace, kmm_model.PLURAL, body
        )

    def patch(self, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            kmm_model.GROUP, kmm_model.VERSION, self.namespace, kmm_model.PLURAL, self.module, body
        )

    def delete(self) -> None:
        self.custom.delete_namespaced_custom_object(
            kmm_model.GROUP, kmm_model.VERSION, self.namespace, kmm_model.PLURAL, self.module
        )

    def get(self) -> dict[str, Any]:
        module: dict[str, Any] = self.custom.get_namespaced_custom_object(
            kmm_model.GROUP, kmm_model.VERSION, self.namespace, kmm_model.PLURAL, self.module
        )
        return module

    def gone(self) -> bool:
        try:
            self.get()
        except k8s.ApiException as error:
            return bool(error.status == 404)
        return False

    def loader_status(self) -> dict[str, int]:
        status: dict[str, int] = (self.get().get("status") or {}).get("moduleLoader") or {}
        return status

    def set_version_label(self, node: str, version: str | None) -> None:
        label = kmm_model.version_module_label(self.namespace, self.module)
        self.core.patch_node(node, {"metadata": {"labels": {label: version}}})


def status(matching: int, desired: int, available: int) -> dict[str, int]:
    """status.moduleLoader as KMM writes it: its fields are omitempty, so zeros are absent."""
    counts = {
        "nodesMatchingSelectorNumber": matching,
        "desiredNumber": desired,
        "availableNumber": available,
    }
    return {key: value for key, value in counts.items() if value}


def attempts_on(emulator: KmmEmulator, node: str) -> list[UnloadAttempt]:
    return [attempt for attempt in emulator.unload_attempts() if attempt.node == node]


@pytest.fixture
def three_nodes(make_node: MakeNode) -> list[str]:
    names = [make_node(f"gpu-{i}", SELECTOR).metadata.name for i in range(3)]
    make_node("cpu-only", {"gpuctl.dev/test-gpu": "false"})
    return names


def test_version_label_change_on_one_node_leaves_the_others_alone(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, three_nodes: list[str]
) -> None:
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(versioned_module("xe-gpu", "1.0"))
    wait_until(
        "no node labelled yet: targeted but nothing loaded",
        lambda: view.loader_status() == status(3, 0, 0),
    )
    for node in three_nodes:
        view.set_version_label(node, "1.0")
    wait_until(
        "1.0 settled everywhere", lambda: all(view.settled_at(node, "1.0") for node in three_nodes)
    )
    wait_until("status counts all three", lambda: view.loader_status() == status(3, 3, 3))

    container = versioned_module("xe-gpu", "2.0")["spec"]["moduleLoader"]["container"]
    view.patch({"spec": {"moduleLoader": {"container": container}}})
    first, *others = three_nodes
    untouched = {node: view.core.read_node(node).metadata.resource_version for node in others}
    kmm_emulator.delay_node(first, 0.5)
    view.set_version_label(first, "2.0")

    wait_until(f"{first} unloads 1.0 first", lambda: not view.ready(first))
    wait_until(f"{first} settles at 2.0", lambda: view.settled_at(first, "2.0"))
    assert kmm_emulator.loaded("xe-gpu", first) == Loaded("2.0", "registry.invalid/xe:2.0")
    wait_until("status still counts all three", lambda: view.loader_status() == status(3, 3, 3))
    for node in others:
        assert view.version_ready(node) == "1.0"
        assert view.core.read_node(node).metadata.resource_version == untouched[node]
    [unload] = attempts_on(kmm_emulator, first)
    assert (unload.cause, unload.kernel_modules, unload.succeeded) == (
        Cause.VERSION_CHANGE,
        ("xe",),
        True,
    )
    assert not any(attempts_on(kmm_emulator, node) for node in others)


def test_failing_node_never_becomes_ready_until_cleared(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, three_nodes: list[str]
) -> None:
    view = View(kube_admin, namespace, "xe-gpu")
    broken = three_nodes[0]
    kmm_emulator.fail_node(broken)
    view.create(versioned_module("xe-gpu", "1.0"))
    for node in three_nodes:
        view.set_version_label(node, "1.0")
    wait_until("two of three available", lambda: view.loader_status() == status(3, 3, 2))
    assert not view.ready(broken)

    kmm_emulator.fail_node(broken, failing=False)
    wait_until("the cleared node loads", lambda: view.version_ready(broken) == "1.0")
    wait_until("all three available", lambda: view.loader_status() == status(3, 3, 3))


def test_removing_the_label_or_the_module_unloads(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, three_nodes: list[str]
) -> None:
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(versioned_module("xe-gpu", "1.0"))
    for node in three_nodes:
        view.set_version_label(node, "1.0")
    wait_until(
        "1.0 ready everywhere",
        lambda: all(view.version_ready(node) == "1.0" for node in three_nodes),
    )

    view.set_version_label(three_nodes[0], None)
    wait_until("the unlabelled node unloads", lambda: not view.ready(three_nodes[0]))
    wait_until("status drops it", lambda: view.loader_status() == status(3, 2, 2))

    kmm_emulator.delay_node(three_nodes[1], 1.0)
    view.delete()
    held = view.get()
    assert held["metadata"]["deletionTimestamp"]
    assert kmm_model.FINALIZER in held["metadata"]["finalizers"]

    wait_until("the Module is released once every node unloaded", view.gone)
    assert not any(view.ready(node) for node in three_nodes)
    causes = [(a.node, a.cause) for a in kmm_emulator.unload_attempts()]
    assert sorted(causes) == sorted(
        [
            (three_nodes[0], Cause.VERSION_CHANGE),
            (three_nodes[1], Cause.MODULE_DELETED),
            (three_nodes[2], Cause.MODULE_DELETED),
        ]
    )


def test_cordon_taint_untargets_a_node_unless_the_module_tolerates_it(
    kube_admin: Any,
    namespace: str,
    kmm_emulator: KmmEmulator,
    cordon_taints: CordonTaintMirror,
    three_nodes: list[str],
) -> None:
    strict = View(kube_admin, namespace, "xe-strict")
    tolerant = View(kube_admin, namespace, "xe-tolerant")
    strict.create(versioned_module("xe-strict", "1.0"))
    tolerant_body = versioned_module("xe-tolerant", "1.0")
    tolerant_body["spec"]["tolerations"] = [
        {"key": UNSCHEDULABLE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
    ]
    tolerant.create(tolerant_body)
    node = three_nodes[0]
    strict.set_version_label(node, "1.0")
    tolerant.set_version_label(node, "1.0")
    wait_until("both ready", lambda: strict.ready(node) and tolerant.ready(node))

    strict.core.patch_node(node, {"spec": {"unschedulable": True}})
    wait_until(
        "the cordon taint appears",
        lambda: any(
            t.key == UNSCHEDULABLE_TAINT["key"]
            for t in strict.core.read_node(node).spec.taints or []
        ),
    )
    wait_until("the intolerant module is unloaded", lambda: not strict.ready(node))
    wait_until("and no longer counted", lambda: strict.loader_status() == status(2, 0, 0))
    assert tolerant.ready(node)
    assert tolerant.loader_status() == status(3, 1, 1)
    assert [(a.module, a.cause) for a in kmm_emulator.unload_attempts()] == [
        ("xe-strict", Cause.TAINT)
    ]

    strict.core.patch_node(node, {"spec": {"unschedulable": False}})
    wait_until("uncordoned: loaded again", lambda: strict.version_ready(node) == "1.0")
    assert not strict.core.read_node(node).spec.taints
