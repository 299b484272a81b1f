"""The unload guard against the real API server: allocated gpu.intel.com ResourceClaims.

Deleting a GPUDriver, removing its kernelModule, and the delete/recreate of a version toggle
are refused while an allocated claim sits on a node the Module targets, with the reason in
status and a Warning Event, and go ahead once the claim is gone. A claim on a node the Module
does not target blocks nothing (per node, not cluster-wide). Version changes between two
values are patched in place, with no unload to guard.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.drivers.module_spec import version_label
from tests.harness.access import KubeCluster
from tests.harness.kmm_emulator import KmmEmulator
from tests.harness.waiting import wait_until
from tests.support.cluster_api import (
    Api,
    gpudriver,
    node_labels,
    simple_spec,
    wait_status,
)
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration


def blocked_message(module: str) -> str:
    return f"allocated GPU ResourceClaims blocking modules.kmm.sigs.x-k8s.io/{module} deletion"


def versioned_spec(namespace: str, version: str | None) -> dict[str, Any]:
    spec = simple_spec(namespace)
    if version is not None:
        spec["kernelModule"]["version"] = version
    return spec


def container_version(api: Api, namespace: str, module: str) -> Any:
    found = api.get_module(namespace, module) or {}
    return found.get("spec", {}).get("moduleLoader", {}).get("container", {}).get("version")


def test_deletion_blocked_by_claim_then_allowed(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name, module = f"{namespace}-g", f"{namespace}-g-gpu"
    make_node("n1", node_labels(namespace))
    created = api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        api.create_claim(namespace, "train", f"{namespace}-n1")
        api.delete_driver(name)
        status = wait_status(
            api, name, lambda s: blocked_message(module) in s.get("errors", []), "is blocked"
        )
        assert status["kmmStatus"] == "Removing"
        assert api.get_module(namespace, module) is not None
        assert kmm_emulator.loaded(module, f"{namespace}-n1") is not None
        events = [
            e for e in api.events_for(created["metadata"]["uid"]) if e["reason"] == "UnloadBlocked"
        ]
        assert events
        assert events[0]["type"] == "Warning"
        assert f"ResourceClaim {namespace}/train" in events[0]["message"]
        assert f"node {namespace}-n1" in events[0]["message"]
        api.delete_claim(namespace, "train")
        wait_until("module deleted", lambda: api.get_module(namespace, module) is None)
        wait_until("gpudriver gone", lambda: api.get_driver(name) is None)


def test_claim_on_an_untargeted_node_does_not_block(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name, module = f"{namespace}-u", f"{namespace}-u-gpu"
    make_node("n1", node_labels(namespace))
    make_node("other", {"kubernetes.io/arch": "amd64"})
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        api.create_claim(namespace, "elsewhere", f"{namespace}-other")
        api.patch_driver(name, {"spec": {"kernelModule": None}})
        wait_until("module deleted", lambda: api.get_module(namespace, module) is None)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "N/A", "reports N/A")


def test_removing_kernel_module_blocked_until_claim_freed(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name, module = f"{namespace}-k", f"{namespace}-k-gpu"
    make_node("n1", node_labels(namespace))
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        api.create_claim(namespace, "infer", f"{namespace}-n1")
        api.patch_driver(name, {"spec": {"kernelModule": None}})
        status = wait_status(
            api, name, lambda s: blocked_message(module) in s.get("errors", []), "is blocked"
        )
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "UnloadBlocked")
        assert api.get_module(namespace, module) is not None
        api.delete_claim(namespace, "infer")
        wait_until("module deleted", lambda: api.get_module(namespace, module) is None)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "N/A", "reports N/A")
        assert status["errors"] == []


def test_version_toggles_recreate_and_value_changes_patch(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name, module = f"{namespace}-v", f"{namespace}-v-gpu"
    make_node("n1", node_labels(namespace))
    created = api.create_driver(gpudriver(name, namespace, versioned_spec(namespace, None)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        first_uid = (api.get_module(namespace, module) or {})["metadata"]["uid"]

        # empty -> set: delete and recreate
        api.patch_driver(name, {"spec": {"kernelModule": {"version": "v1"}}})
        wait_until(
            "module has version v1", lambda: container_version(api, namespace, module) == "v1"
        )
        second_uid = (api.get_module(namespace, module) or {})["metadata"]["uid"]
        assert second_uid != first_uid
        assert "ModuleRecreating" in api.event_reasons(created["metadata"]["uid"])

        # v1 -> v2: patched in place
        api.patch_driver(name, {"spec": {"kernelModule": {"version": "v2"}}})
        wait_until(
            "module has version v2", lambda: container_version(api, namespace, module) == "v2"
        )
        assert (api.get_module(namespace, module) or {})["metadata"]["uid"] == second_uid

        # set -> empty: delete and recreate again
        api.patch_driver(name, {"spec": {"kernelModule": {"version": None}}})

        def recreated_without_version() -> bool:
            found = api.get_module(namespace, module)
            if found is None or found["metadata"]["uid"] == second_uid:
                return False
            return container_version(api, namespace, module) is None

        wait_until("module recreated without version", recreated_without_version)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1 again")


def test_version_toggle_blocked_by_claim_until_freed(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name, module = f"{namespace}-t", f"{namespace}-t-gpu"
    make_node("n1", node_labels(namespace))
    api.create_driver(gpudriver(name, namespace, versioned_spec(namespace, None)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        uid = (api.get_module(namespace, module) or {})["metadata"]["uid"]
        api.create_claim(namespace, "busy", f"{namespace}-n1")
        api.patch_driver(name, {"spec": {"kernelModule": {"version": "v1"}}})
        wait_status(
            api, name, lambda s: blocked_message(module) in s.get("errors", []), "is blocked"
        )
        assert (api.get_module(namespace, module) or {})["metadata"]["uid"] == uid
        assert container_version(api, namespace, module) is None
        api.delete_claim(namespace, "busy")
        wait_until(
            "module has version v1", lambda: container_version(api, namespace, module) == "v1"
        )
        # Ordered upgrade: KMM loads v1 only where the node carries the version label.
        api.label_node(f"{namespace}-n1", version_label(namespace, module), "v1")
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        assert status["errors"] == []
