"""The coordinator against the real API server: the KMM Module it writes, and status.

A GPUDriver becomes a Module that KMM's real CRD accepts, with every field mapped; KMM (its
own operator, testbed/harness/real_kmm.py) loads it on the nodes carrying TARGET_LABEL and
`kmmStatus` follows; removing `kernelModule` or the GPUDriver keeps the Module until no node
carries the label, then removes it. Scenarios of the reference operator's controller tests.
The rollout (coordinator/rollout) writes and removes TARGET_LABEL; here the test plays its
two writes (`load_as_the_rollout_would`, `unload_as_the_rollout_would`): the coordinator runs
without agents, so its rollout moves no node.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common.names import FINALIZER, TARGET_LABEL
from gpuctl.gpudriver.module_spec import desired_module, kmm_version
from testbed.cluster_api import (
    Api,
    gpudriver,
    mapped_image,
    node_labels,
    simple_spec,
    wait_status,
)
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator
from tests.support.gpu_nodes import GpuNodes

pytestmark = pytest.mark.integration


def full_spec(namespace: str) -> dict[str, Any]:
    return {
        "pullSecret": {"name": "my-registry"},
        "nodeSelector": {"gpuctl.test/ns": namespace},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "kernelModule": {
            "version": "v7.1.4.6",
            "parameters": ["max_vfs=7", "force_probe=*"],
            "firmwarePath": "/firmware",
            "modulesLoadingOrder": ["xe", "drm_gpuvm", "drm_buddy"],
            "registryTLS": {"insecure": False, "insecureSkipTLSVerify": True},
            "imageRebuildTriggerGeneration": 2,
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
        assert module["spec"]["selector"] == {TARGET_LABEL: name}
        assert module["spec"]["tolerations"] == [
            {"operator": "Exists"},
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        ]
        assert container["version"] == kmm_version(driver["spec"])
        assert container["version"].startswith("v7.1.4.6-")
        assert container["modprobe"]["parameters"] == ["max_vfs=7", "force_probe=*"]
        assert container["inTreeModulesToRemove"] == ["xe"]
        mapping = container["kernelMappings"][0]
        assert mapping["inTreeModulesToRemove"] == ["xe", "i915"]
        assert mapping["build"]["selector"] == {
            "gpuctl.test/ns": namespace,
            "kubernetes.io/arch": "amd64",
        }
        assert mapping["registryTLS"] == {"insecure": True}
        assert container["registryTLS"] == {"insecure": False, "insecureSkipTLSVerify": True}
        assert container["modprobe"]["firmwarePath"] == "/firmware"
        assert container["modprobe"]["modulesLoadingOrder"] == ["xe", "drm_gpuvm", "drm_buddy"]
        assert module["spec"]["imageRebuildTriggerGeneration"] == 2
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
    gpu_nodes: GpuNodes,
) -> None:
    name = f"{namespace}-st"
    gpu_nodes.add("n1", node_labels(namespace))
    gpu_nodes.refuse_loads(f"{namespace}-n1")
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_status(api, name, lambda s: s.get("kmmStatus") == "0/0", "reports 0/0")
        api.load_as_the_rollout_would(f"{namespace}-n1", name, namespace)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "0/1", "reports 0/1")
        assert status["errors"] == [
            f"module loader not fully available (0/1) for modules.kmm.sigs.x-k8s.io/{name}-gpu"
        ]
        gpu_nodes.refuse_loads(f"{namespace}-n1", None)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        assert status["errors"] == []
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        gpu_nodes.add("n2", node_labels(namespace))
        api.load_as_the_rollout_would(f"{namespace}-n2", name, namespace)
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


def _left(status: dict[str, Any]) -> str:
    ready = next(c for c in status.get("conditions") or [] if c["type"] == "Ready")
    return str(ready["message"])


def test_removing_kernel_module_unloads_node_by_node_then_deletes_the_module(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, node = f"{namespace}-rm", f"{namespace}-n1"
    gpu_nodes.add("n1", node_labels(namespace))
    created = api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_until("module", lambda: api.get_module(namespace, f"{name}-gpu"))
        api.load_as_the_rollout_would(node, name, namespace)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        api.patch_driver(name, {"spec": {"kernelModule": None}})
        status = wait_status(api, name, lambda s: "1 node left" in _left(s), "waits for its node")
        assert status["kmmStatus"] == "Removing"
        assert api.get_module(namespace, f"{name}-gpu") is not None
        assert gpu_nodes.kmm.loaded(f"{name}-gpu", node) is not None
        api.unload_as_the_rollout_would(node, name, namespace)
        wait_until("module deleted", lambda: api.get_module(namespace, f"{name}-gpu") is None)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "N/A", "reports N/A")
        assert status["errors"] == []
        assert gpu_nodes.kmm.loaded(f"{name}-gpu", node) is None
        assert "ModuleDeleting" in api.event_reasons(created["metadata"]["uid"])


def test_deleting_the_gpudriver_keeps_module_and_finalizer_until_no_node_is_targeted(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, module = f"{namespace}-del", f"{namespace}-del-gpu"
    nodes = [gpu_nodes.add(n, node_labels(namespace)) for n in ("n1", "n2")]
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_until("module", lambda: api.get_module(namespace, module))
        for node in nodes:
            api.load_as_the_rollout_would(node, name, namespace)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "2/2", "reports 2/2")
        api.delete_driver(name)
        wait_status(api, name, lambda s: "2 nodes left" in _left(s), "waits for 2 nodes")
        api.unload_as_the_rollout_would(nodes[0], name, namespace)
        wait_status(api, name, lambda s: "1 node left" in _left(s), "waits for 1 node")
        wait_until("first node unloaded", lambda: gpu_nodes.kmm.loaded(module, nodes[0]) is None)
        # One node at a time: the other keeps its driver.
        assert gpu_nodes.kmm.loaded(module, nodes[1]) is not None
        driver = api.get_driver(name)
        assert driver is not None
        assert FINALIZER in driver["metadata"]["finalizers"]
        assert api.get_module(namespace, module) is not None
        api.unload_as_the_rollout_would(nodes[1], name, namespace)
        wait_until("module deleted", lambda: api.get_module(namespace, module) is None)
        wait_until("gpudriver gone", lambda: api.get_driver(name) is None)
        assert gpu_nodes.kmm.loaded(module, nodes[1]) is None


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
                            {"regexp": "^.+$", "containerImage": mapped_image("2.0")}
                        ]
                    },
                }
            },
        )

        def updated() -> dict[str, Any] | None:
            module = api.get_module(namespace, f"{name}-gpu")
            mapping = (module or {}).get("spec", {}).get("moduleLoader", {}).get("container", {})
            image = mapping.get("kernelMappings", [{}])[0].get("containerImage")
            return module if image == mapped_image("2.0") else None

        module = wait_until("module updated", updated)
        assert module["metadata"]["uid"] == first["metadata"]["uid"]
        assert module["spec"]["selector"] == {TARGET_LABEL: name}
        version = module["spec"]["moduleLoader"]["container"]["version"]
        assert version != first["spec"]["moduleLoader"]["container"]["version"]
        assert version.startswith("cfg-")
        wait_status(api, name, lambda s: s.get("observedGeneration") == 2, "observes gen 2")
