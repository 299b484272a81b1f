"""The coordinator against the real API server: the KMM Module it writes, and status.

A GPUDriver becomes a Module that KMM's real CRD accepts, with every field mapped; KMM (the
test-side emulator) loads it and `kmmStatus` follows; removing `kernelModule` or the
GPUDriver removes the Module. Scenarios of the reference operator's controller tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.drivers.module_spec import desired_module
from gpuctl.common.names import FINALIZER
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


def full_spec(namespace: str) -> dict[str, Any]:
    return {
        "pullSecret": {"name": "my-registry"},
        "nodeSelector": {"gpuctl.test/ns": namespace},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "kernelModule": {
            "firmwarePath": "/firmware",
            "modulesLoadingOrder": ["xe", "drm_gpuvm", "drm_buddy"],
            "registryTLS": {"insecure": False, "insecureSkipTLSVerify": True},
            "kernelMappings": [
                {
                    "regexp": "^6\\.8\\..*-generic$",
                    "containerImage": "reg.example.com/xe:v7.1.4.6-$KERNEL_FULL_VERSION",
                    "build": {
                        "dockerfileConfigMap": {"name": "xe-build"},
                        "buildArgs": [{"name": "XE_TAG", "value": "xebr_v7.1.4.6"}],
                        "secrets": [{"name": "private-repo"}],
                    },
                    "registryTLS": {"insecure": True},
                    "inTreeModulesToRemove": ["i915"],
                }
            ],
        },
    }


def test_module_created_with_every_field_mapped_and_accepted_by_kmm_crd(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-full"
    created = api.create_driver(gpudriver(name, namespace, full_spec(namespace)))
    assert created["spec"]["kernelModule"]["moduleName"] == "xe"  # the CRD's default
    with running_coordinator(kube_cluster, namespace):
        module = wait_until("module exists", lambda: api.get_module(namespace, f"{name}-gpu"))
        driver = api.get_driver(name)
        assert driver is not None
        expected = desired_module(driver, namespace)
        assert expected is not None
        assert module["spec"] == expected["spec"]
        container = module["spec"]["moduleLoader"]["container"]
        assert module["spec"]["imageRepoSecret"] == {"name": "my-registry"}
        assert module["spec"]["selector"] == {
            "gpuctl.test/ns": namespace,
            "kubernetes.io/arch": "amd64",
        }
        assert module["spec"]["tolerations"] == [
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            },
        ]
        assert container["inTreeModulesToRemove"] == ["xe"]
        mapping = container["kernelMappings"][0]
        assert mapping["inTreeModulesToRemove"] == ["xe", "i915"]
        assert mapping["build"]["selector"] == module["spec"]["selector"]
        assert mapping["registryTLS"] == {"insecure": True}
        assert container["registryTLS"] == {"insecure": False, "insecureSkipTLSVerify": True}
        assert container["modprobe"]["firmwarePath"] == "/firmware"
        assert container["modprobe"]["modulesLoadingOrder"] == ["xe", "drm_gpuvm", "drm_buddy"]
        owner = module["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "GPUDriver",
            name,
            driver["metadata"]["uid"],
        )
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "0/0", "reports 0/0")
        assert status["readyLabel"] == f"kmm.node.kubernetes.io/{namespace}.{name}-gpu.ready"
        assert status["observedGeneration"] == driver["metadata"]["generation"]
        assert FINALIZER in (api.get_driver(name) or {})["metadata"]["finalizers"]
        assert "ModuleCreated" in api.event_reasons(driver["metadata"]["uid"])


def test_kmm_status_follows_the_module_loader_and_errors_clear(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name = f"{namespace}-st"
    make_node("n1", node_labels(namespace))
    kmm_emulator.fail_node(f"{namespace}-n1")
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "0/1", "reports 0/1")
        assert status["errors"] == [
            f"module loader not fully available (0/1) for modules.kmm.sigs.x-k8s.io/{name}-gpu"
        ]
        kmm_emulator.fail_node(f"{namespace}-n1", failing=False)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        assert status["errors"] == []
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        make_node("n2", node_labels(namespace))
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "2/2", "reports 2/2")


def test_no_module_without_kernel_module(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-none"
    api.create_driver(gpudriver(name, namespace, {"nodeSelector": {"a": "b"}}))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "N/A", "reports N/A")
        assert status["errors"] == []
        assert "readyLabel" not in status
        assert api.get_module(namespace, f"{name}-gpu") is None


def test_removing_kernel_module_deletes_the_module(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name = f"{namespace}-rm"
    make_node("n1", node_labels(namespace))
    created = api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        api.patch_driver(name, {"spec": {"kernelModule": None}})
        wait_until("module deleted", lambda: api.get_module(namespace, f"{name}-gpu") is None)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "N/A", "reports N/A")
        assert status["errors"] == []
        assert kmm_emulator.loaded(f"{name}-gpu", f"{namespace}-n1") is None
        assert "ModuleDeleting" in api.event_reasons(created["metadata"]["uid"])


def test_deleting_the_gpudriver_removes_module_then_driver(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    make_node: Any,
    kmm_emulator: KmmEmulator,
) -> None:
    name = f"{namespace}-del"
    make_node("n1", node_labels(namespace))
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        api.delete_driver(name)
        wait_until("module deleted", lambda: api.get_module(namespace, f"{name}-gpu") is None)
        wait_until("gpudriver gone", lambda: api.get_driver(name) is None)
        assert kmm_emulator.loaded(f"{name}-gpu", f"{namespace}-n1") is None


def test_spec_change_patches_module_in_place(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-upd"
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        first = wait_until("module", lambda: api.get_module(namespace, f"{name}-gpu"))
        api.patch_driver(
            name,
            {
                "spec": {
                    "useNFDLabeling": True,
                    "kernelModule": {
                        "kernelMappings": [
                            {"regexp": "^.+$", "containerImage": "registry.example.com/xe:2.0"}
                        ]
                    },
                }
            },
        )

        def updated() -> dict[str, Any] | None:
            module = api.get_module(namespace, f"{name}-gpu")
            mapping = (module or {}).get("spec", {}).get("moduleLoader", {}).get("container", {})
            image = mapping.get("kernelMappings", [{}])[0].get("containerImage")
            return module if image == "registry.example.com/xe:2.0" else None

        module = wait_until("module updated", updated)
        assert module["metadata"]["uid"] == first["metadata"]["uid"]
        assert module["spec"]["selector"] == {
            "gpuctl.test/ns": namespace,
            "intel.feature.node.kubernetes.io/gpu-pci": "true",
            "kubernetes.io/arch": "amd64",
        }
        wait_status(api, name, lambda s: s.get("observedGeneration") == 2, "observes gen 2")
