"""The test-side KMM follows Modules, Nodes and version labels the way KMM does, on a real API,
and records every unload it does (with whether the node was busy then)."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.harness import kmm_model
from tests.harness.cordon_taint import UNSCHEDULABLE_TAINT, CordonTaintMirror
from tests.harness.kmm_emulator import RESTART_SECONDS, KmmEmulator
from tests.harness.kmm_model import Loaded
from tests.harness.kmm_safety import Busy, Cause, UnloadAttempt
from tests.harness.kmm_scheduling import worker_version_label
from tests.harness.kmm_versions import schedule_version_label
from tests.harness.waiting import wait_until
from tests.support.fixture_types import MakeNode

pytestmark = pytest.mark.integration

SELECTOR = {"gpuctl.dev/test-gpu": "true"}
IMAGE_1 = "registry.invalid/xe:1"
IMAGE_2 = "registry.invalid/xe:2"


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


def unversioned_module(name: str, image: str = IMAGE_1, **container: Any) -> dict[str, Any]:
    """A Module without version, as gpuctl writes one: xe replaces the in-tree xe."""
    return {
        "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
        "kind": "Module",
        "metadata": {"name": name},
        "spec": {
            "selector": dict(SELECTOR),
            "moduleLoader": {
                "container": {
                    "modprobe": {"moduleName": "xe"},
                    "inTreeModulesToRemove": ["xe"],
                    "kernelMappings": [{"regexp": r"^6\.8\.", "containerImage": image}],
                    **container,
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


class Changes:
    """What ``on_change`` reported, per node: the loads (Loaded) and unloads (None) in order."""

    def __init__(self, emulator: KmmEmulator) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[Loaded | None]] = {}
        emulator.on_change(self._record)

    def _record(self, _module: str, node: str, loaded: Loaded | None) -> None:
        with self._lock:
            self._events.setdefault(node, []).append(loaded)

    def of(self, node: str) -> list[Loaded | None]:
        with self._lock:
            return list(self._events.get(node, []))


def attempts_on(emulator: KmmEmulator, node: str) -> list[UnloadAttempt]:
    return [attempt for attempt in emulator.unload_attempts() if attempt.node == node]


def image_loaded(emulator: KmmEmulator, module: str, nodes: list[str], image: str) -> bool:
    return all(
        (emulator.loaded(module, node) or Loaded("", "")).container_image == image for node in nodes
    )


@pytest.fixture
def three_nodes(make_node: MakeNode) -> list[str]:
    names = [make_node(f"gpu-{i}", SELECTOR).metadata.name for i in range(3)]
    make_node("cpu-only", {"gpuctl.dev/test-gpu": "false"})
    return names


def test_version_label_change_on_one_node_leaves_the_others_alone(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, three_nodes: list[str]
) -> None:
    view = View(kube_admin, namespace, "xe-gpu")
    changes = Changes(kmm_emulator)
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
    view.set_version_label(first, "2.0")

    wait_until(f"{first} settles at 2.0", lambda: view.settled_at(first, "2.0"))
    one, two = Loaded("1.0", "registry.invalid/xe:1.0"), Loaded("2.0", "registry.invalid/xe:2.0")
    assert changes.of(first) == [one, None, two]  # 1.0 unloaded first
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

    kmm_emulator.set_busy(three_nodes[1], "pid 7 holds card0", held=True)
    view.delete()
    wait_until(
        "the held node refuses the unload", lambda: attempts_on(kmm_emulator, three_nodes[1])
    )
    held = view.get()
    assert held["metadata"]["deletionTimestamp"]
    assert kmm_model.FINALIZER in held["metadata"]["finalizers"]

    kmm_emulator.clear_busy(three_nodes[1])
    wait_until("the Module is released once every node unloaded", view.gone)
    assert not any(view.ready(node) for node in three_nodes)
    causes = {(a.node, a.cause, a.succeeded) for a in kmm_emulator.unload_attempts()}
    assert causes == {
        (three_nodes[0], Cause.VERSION_CHANGE, True),
        (three_nodes[1], Cause.MODULE_DELETED, False),
        (three_nodes[1], Cause.MODULE_DELETED, True),
        (three_nodes[2], Cause.MODULE_DELETED, True),
    }


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


# --- config changes in place ---------------------------------------------------------------


def test_image_changed_in_place_unloads_then_loads_on_every_targeted_node(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, three_nodes: list[str]
) -> None:
    view = View(kube_admin, namespace, "xe-gpu")
    changes = Changes(kmm_emulator)
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded everywhere", lambda: view.loader_status() == status(3, 3, 3))
    first, *others = three_nodes
    kmm_emulator.set_busy(first, "pid 7 holds card0", held=True)

    container = unversioned_module("xe-gpu", IMAGE_2)["spec"]["moduleLoader"]["container"]
    view.patch({"spec": {"moduleLoader": {"container": container}}})
    wait_until(f"{first} refuses the unload", lambda: attempts_on(kmm_emulator, first))
    # N7: a config change keeps the spec entry, so .ready stays while KMM reloads.
    assert kmm_emulator.worker_action("xe-gpu", first) == "Unload"
    assert view.ready(first)
    kmm_emulator.clear_busy(first)
    wait_until(
        "the new image is loaded on all three",
        lambda: (
            view.loader_status() == status(3, 3, 3)
            and image_loaded(kmm_emulator, "xe-gpu", three_nodes, IMAGE_2)
        ),
    )

    for node in three_nodes:
        assert changes.of(node) == [Loaded("", IMAGE_1), None, Loaded("", IMAGE_2)]
        assert view.ready(node)
    for node in others:
        [unload] = attempts_on(kmm_emulator, node)
        assert (unload.cause, unload.kernel_modules, unload.succeeded, unload.busy) == (
            Cause.CONFIG_CHANGE,
            ("xe",),
            True,
            None,
        )
    *refused, done = attempts_on(kmm_emulator, first)
    assert refused
    assert all(a.cause is Cause.CONFIG_CHANGE and not a.succeeded for a in refused)
    assert (done.cause, done.succeeded) == (Cause.CONFIG_CHANGE, True)
    nodes_unloaded = {a.node for a in kmm_emulator.unload_attempts()}
    assert nodes_unloaded == set(three_nodes)  # nothing on the cpu-only node


@pytest.mark.parametrize(
    "modprobe",
    [
        {"moduleName": "xe", "parameters": ["force_probe=*"]},
        {"moduleName": "xe", "firmwarePath": "/firmware/xe"},
    ],
    ids=["parameters", "firmwarePath"],
)
def test_modprobe_changed_in_place_unloads_then_loads(
    kube_admin: Any,
    namespace: str,
    kmm_emulator: KmmEmulator,
    make_node: MakeNode,
    modprobe: dict[str, Any],
) -> None:
    nodes = [make_node(f"gpu-{i}", SELECTOR).metadata.name for i in range(2)]
    view = View(kube_admin, namespace, "xe-gpu")
    changes = Changes(kmm_emulator)
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded on both", lambda: view.loader_status() == status(2, 2, 2))

    view.patch({"spec": {"moduleLoader": {"container": {"modprobe": modprobe}}}})

    def reloaded() -> bool:
        entries = [kmm_emulator.status_entry("xe-gpu", node) for node in nodes]
        return all(
            entry is not None
            and entry.config.modprobe.parameters == tuple(modprobe.get("parameters", ()))
            and entry.config.modprobe.firmware_path == modprobe.get("firmwarePath", "")
            for entry in entries
        )

    wait_until("both reloaded with the new modprobe", reloaded)
    for node in nodes:
        assert changes.of(node) == [Loaded("", IMAGE_1), None, Loaded("", IMAGE_1)]
        assert [a.cause for a in attempts_on(kmm_emulator, node)] == [Cause.CONFIG_CHANGE]


# --- targeting -----------------------------------------------------------------------------


def test_narrowed_selector_unloads_on_the_dropped_nodes(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    kept = make_node("kept", {**SELECTOR, "pool": "a"}).metadata.name
    dropped = [make_node(f"dropped-{i}", {**SELECTOR, "pool": "b"}).metadata.name for i in range(2)]
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded on all three", lambda: view.loader_status() == status(3, 3, 3))

    view.patch({"spec": {"selector": {"pool": "a"}}})
    wait_until("only the kept node counts", lambda: view.loader_status() == status(1, 1, 1))
    wait_until(
        "the dropped nodes are unloaded and unlabelled",
        lambda: not any(view.ready(node) for node in dropped),
    )
    assert sorted((a.node, a.cause) for a in kmm_emulator.unload_attempts()) == sorted(
        (node, Cause.UNTARGETED) for node in dropped
    )
    assert kmm_emulator.loaded("xe-gpu", kept) == Loaded("", IMAGE_1)
    assert all(kmm_emulator.loaded("xe-gpu", node) is None for node in dropped)


def test_untolerated_no_schedule_taint_unloads_and_prefer_no_schedule_does_not(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    soft, hard = (make_node(name, SELECTOR).metadata.name for name in ("soft", "hard"))
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded on both", lambda: view.loader_status() == status(2, 2, 2))

    maintenance = {"key": "example.com/maintenance", "value": "true"}
    view.core.patch_node(
        soft, {"spec": {"taints": [{**maintenance, "effect": "PreferNoSchedule"}]}}
    )
    view.core.patch_node(hard, {"spec": {"taints": [{**maintenance, "effect": "NoSchedule"}]}})
    wait_until("the NoSchedule node is unloaded", lambda: not view.ready(hard))
    wait_until("and not counted", lambda: view.loader_status() == status(1, 1, 1))
    assert [(a.node, a.cause) for a in kmm_emulator.unload_attempts()] == [(hard, Cause.TAINT)]
    assert view.ready(soft)
    assert kmm_emulator.loaded("xe-gpu", soft) == Loaded("", IMAGE_1)


def test_a_kept_entry_its_node_no_longer_tolerates_loses_ready_but_stays_loaded(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    node, probe = (make_node(name, SELECTOR).metadata.name for name in ("gpu", "probe"))
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(versioned_module("xe-gpu", "1.0"))
    view.set_version_label(node, "1.0")
    wait_until("1.0 settled", lambda: view.settled_at(node, "1.0"))
    # Version 2.0 tolerates the taint, but the node still runs 1.0's entry (M5 keeps it),
    # whose tolerations do not: N5 skips that entry and takes its ready labels away.
    taint = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    body = versioned_module("xe-gpu", "2.0")["spec"]
    view.patch({"spec": {"moduleLoader": body["moduleLoader"], "tolerations": [taint]}})
    view.set_version_label(probe, "2.0")
    wait_until("KMM follows the 2.0 Module", lambda: view.settled_at(probe, "2.0"))
    view.core.patch_node(
        node, {"spec": {"taints": [{"key": taint["key"], "effect": "NoSchedule"}]}}
    )
    wait_until("the ready labels go", lambda: view.version_ready(node) is None)
    assert not view.ready(node)
    assert kmm_emulator.loaded("xe-gpu", node) == Loaded("1.0", "registry.invalid/xe:1.0")
    assert kmm_emulator.unload_attempts() == []


# --- in-tree removal, held nodes, the busy record ---------------------------------------------


def test_a_loader_where_xe_is_live_in_tree_unloads_it_first(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    in_tree, bare = (make_node(name, SELECTOR).metadata.name for name in ("in-tree", "bare"))
    kmm_emulator.set_live_modules(in_tree, {"xe"})
    kmm_emulator.set_busy(in_tree, "pid 42 holds /dev/dri/renderD128")
    seen: list[UnloadAttempt] = []
    kmm_emulator.on_unload_attempt(seen.append)
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded on both", lambda: view.loader_status() == status(2, 2, 2))

    [removal] = kmm_emulator.unload_attempts()
    assert (removal.node, removal.cause, removal.kernel_modules, removal.succeeded) == (
        in_tree,
        Cause.IN_TREE_REMOVAL,
        ("xe",),
        True,
    )
    assert removal.busy == Busy("pid 42 holds /dev/dri/renderD128")
    assert kmm_emulator.unloads_while_busy() == [removal]
    assert seen == [removal]
    assert kmm_emulator.live_modules(in_tree) == {"xe"}  # KMM's xe now
    assert kmm_emulator.live_modules(bare) == {"xe"}


def test_an_unloader_keeps_going_when_the_node_is_targeted_again(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    node = make_node("gpu", SELECTOR).metadata.name
    view = View(kube_admin, namespace, "xe-gpu")
    changes = Changes(kmm_emulator)
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded", lambda: kmm_emulator.loaded("xe-gpu", node) is not None)
    kmm_emulator.set_busy(node, "pid 7 holds card0", held=True)

    view.core.patch_node(node, {"metadata": {"labels": {"gpuctl.dev/test-gpu": "false"}}})
    wait_until("the unloader hits EBUSY", lambda: attempts_on(kmm_emulator, node))
    view.core.patch_node(node, {"metadata": {"labels": SELECTOR}})
    wait_until(
        "the node is targeted again", lambda: kmm_emulator.spec_entry("xe-gpu", node) is not None
    )
    assert kmm_emulator.worker_action("xe-gpu", node) == "Unload"  # N3: not cancelled
    assert kmm_emulator.loaded("xe-gpu", node) is not None

    kmm_emulator.clear_busy(node)
    wait_until("unloaded, then loaded again", lambda: len(changes.of(node)) == 3)
    assert changes.of(node) == [Loaded("", IMAGE_1), None, Loaded("", IMAGE_1)]
    *refused, done = attempts_on(kmm_emulator, node)
    assert refused
    assert all(not a.succeeded and a.cause is Cause.UNTARGETED for a in refused)
    assert (done.succeeded, done.cause, done.busy) == (True, Cause.UNTARGETED, None)
    wait_until("ready again", lambda: view.ready(node))


def test_ebusy_is_retried_every_second_until_the_node_is_released(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    node = make_node("gpu", SELECTOR).metadata.name
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded", lambda: kmm_emulator.loaded("xe-gpu", node) is not None)
    kmm_emulator.set_busy(node, "pid 7 holds card0", held=True)

    container = unversioned_module("xe-gpu", IMAGE_2)["spec"]["moduleLoader"]["container"]
    view.patch({"spec": {"moduleLoader": {"container": container}}})
    wait_until("three refused attempts", lambda: len(attempts_on(kmm_emulator, node)) >= 3)
    kmm_emulator.clear_busy(node)
    wait_until(
        "the new image is loaded", lambda: image_loaded(kmm_emulator, "xe-gpu", [node], IMAGE_2)
    )

    attempts = attempts_on(kmm_emulator, node)
    *refused, done = attempts
    assert len(refused) >= 3
    assert all(not a.succeeded and a.busy == Busy("pid 7 holds card0", True) for a in refused)
    assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(attempts)]
    assert all(gap >= RESTART_SECONDS * 0.9 for gap in gaps)
    assert (done.succeeded, done.busy, done.cause) == (True, None, Cause.CONFIG_CHANGE)
    assert kmm_emulator.unloads_while_busy() == refused


def test_module_deletion_unloads_then_removes_the_finalizer(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    nodes = [make_node(f"gpu-{i}", SELECTOR).metadata.name for i in range(2)]
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded on both", lambda: view.loader_status() == status(2, 2, 2))
    kmm_emulator.set_busy(nodes[0], "pid 7 holds card0", held=True)

    view.delete()
    wait_until("the held node refuses the unload", lambda: attempts_on(kmm_emulator, nodes[0]))
    wait_until("the other node unloads", lambda: kmm_emulator.loaded("xe-gpu", nodes[1]) is None)
    assert kmm_model.FINALIZER in view.get()["metadata"]["finalizers"]
    assert kmm_emulator.loaded("xe-gpu", nodes[0]) is not None

    kmm_emulator.clear_busy(nodes[0])
    wait_until("the Module is released once both unloaded", view.gone)
    assert kmm_emulator.loaded("xe-gpu", nodes[0]) is None
    assert {a.cause for a in kmm_emulator.unload_attempts()} == {Cause.MODULE_DELETED}
    assert all(a.succeeded for a in attempts_on(kmm_emulator, nodes[1]))
    assert not any(view.ready(node) for node in nodes)


def test_the_busy_record_lists_exactly_the_unloads_made_while_busy(
    kube_admin: Any, namespace: str, kmm_emulator: KmmEmulator, make_node: MakeNode
) -> None:
    busy, idle = (make_node(name, SELECTOR).metadata.name for name in ("busy", "idle"))
    view = View(kube_admin, namespace, "xe-gpu")
    view.create(unversioned_module("xe-gpu"))
    wait_until("loaded on both", lambda: view.loader_status() == status(2, 2, 2))
    kmm_emulator.busy_when(lambda node: Busy("VFs handed to a VM") if node == busy else None)

    container = unversioned_module("xe-gpu", IMAGE_2)["spec"]["moduleLoader"]["container"]
    view.patch({"spec": {"moduleLoader": {"container": container}}})
    wait_until(
        "reloaded on both", lambda: image_loaded(kmm_emulator, "xe-gpu", [busy, idle], IMAGE_2)
    )

    [hurt] = kmm_emulator.unloads_while_busy()
    assert (hurt.node, hurt.cause, hurt.succeeded) == (busy, Cause.CONFIG_CHANGE, True)
    assert hurt.busy == Busy("VFs handed to a VM")
    assert [a.busy for a in attempts_on(kmm_emulator, idle)] == [None]
    with pytest.raises(AssertionError, match="VFs handed to a VM"):
        kmm_emulator.assert_no_unload_while_busy()
