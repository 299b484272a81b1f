"""KMM acts on a node only after gpuctl decided it may, against the real API server and KMM's
own operator (testbed/harness/real_kmm.py): the Module selects TARGET_LABEL, so no change of
the GPUDriver reaches a loaded node by itself.

- A config change (a new image) is a new Module version: KMM leaves each loaded node as it is
  (its version label still names the old one) until the rollout moves it.
- A mapping change that would leave a targeted node without a mapping (KMM: "no mapping →
  remove", before the version) holds the Module update until that node is unloaded.
- A Module an older gpuctl wrote (the user's selector) is switched to TARGET_LABEL only after
  every node it loaded carries TARGET_LABEL: nothing is unloaded.
- A GPUDriver deleted while KMM is not seen keeps its finalizer while a node carries
  TARGET_LABEL.

The rollout's per-node writes are played by the test (`load_as_the_rollout_would`,
`unload_as_the_rollout_would`); the coordinator runs without agents, so its rollout moves no
node.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest

from gpuctl.common.names import FINALIZER, TARGET_LABEL
from gpuctl.gpudriver.module_spec import desired_module, version_label
from testbed.cluster_api import (
    TEST_LABEL,
    Api,
    SwitchableKmm,
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
from tests.support.kmm_matrix import EACH_KMM

pytestmark = pytest.mark.integration


def container(api: Api, namespace: str, module: str) -> dict[str, Any]:
    found = api.get_module(namespace, module) or {}
    return dict(found.get("spec", {}).get("moduleLoader", {}).get("container", {}))


def node_label(api: Api, node: str, key: str) -> str | None:
    found = api.kube.request("GET", f"/api/v1/nodes/{node}")
    return (found["metadata"].get("labels") or {}).get(key)


def test_a_config_change_reaches_no_loaded_node_by_itself(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, module, node = f"{namespace}-cfg", f"{namespace}-cfg-gpu", f"{namespace}-n1"
    gpu_nodes.add("n1", node_labels(namespace))
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        first = wait_until("module", lambda: api.get_module(namespace, module))
        api.load_as_the_rollout_would(node, name, namespace)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        loaded = gpu_nodes.kmm.loaded(module, node)
        assert loaded is not None
        since = time.time()
        api.patch_driver(
            name,
            {
                "spec": {
                    "kernelModule": {
                        "kernelMappings": [
                            {"regexp": "^.+$", "containerImage": mapped_image("2.0")}
                        ]
                    }
                }
            },
        )
        wait_until(
            "module asks for the new version",
            lambda: (
                container(api, namespace, module).get("version")
                != first["spec"]["moduleLoader"]["container"]["version"]
            ),
        )
        module_now = api.get_module(namespace, module)
        assert module_now is not None
        assert module_now["metadata"]["uid"] == first["metadata"]["uid"]
        wait_status(api, name, lambda s: s.get("observedGeneration") == 2, "observes gen 2")
        assert gpu_nodes.kmm.loaded(module, node) == loaded
        assert gpu_nodes.unloads_since(since) == set()


@EACH_KMM
def test_mapping_loss_holds_the_update_until_the_node_is_unloaded(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, module, node = f"{namespace}-map", f"{namespace}-map-gpu", f"{namespace}-n1"
    gpu_nodes.add("n1", node_labels(namespace))
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_until("module", lambda: api.get_module(namespace, module))
        api.load_as_the_rollout_would(node, name, namespace)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        before = container(api, namespace, module)
        api.patch_driver(
            name,
            {
                "spec": {
                    "kernelModule": {
                        "kernelMappings": [
                            {"regexp": "^7\\.0\\.", "containerImage": mapped_image("7.0")}
                        ]
                    }
                }
            },
        )
        held = (
            f"holding the Module update: nodes {node} run a kernel no new kernel mapping "
            "serves; they are unloaded node by node first"
        )
        status = wait_status(api, name, lambda s: held in s.get("errors", []), "holds")
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "ModuleUpdateHeld")
        assert container(api, namespace, module) == before
        assert gpu_nodes.kmm.loaded(module, node) is not None
        api.unload_as_the_rollout_would(node, name, namespace)
        wait_until(
            "module updated",
            lambda: container(api, namespace, module)["kernelMappings"][0]["regexp"] == "^7\\.0\\.",
        )
        wait_status(api, name, lambda s: not s.get("errors"), "no longer holds")


def test_an_older_gpuctls_module_is_switched_only_after_its_nodes_carry_the_label(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, module = f"{namespace}-old", f"{namespace}-old-gpu"
    spec = simple_spec(namespace)
    spec["kernelModule"]["version"] = "v1"
    driver = api.create_driver(gpudriver(name, namespace, spec))
    old = desired_module(driver, namespace)
    assert old is not None
    old["spec"]["selector"] = {TEST_LABEL: namespace, "kubernetes.io/arch": "amd64"}
    old["spec"]["moduleLoader"]["container"]["version"] = "v1"
    api.kube.request("POST", api.module_path(namespace), body=old)
    nodes = [gpu_nodes.add(n, node_labels(namespace)) for n in ("n1", "n2")]
    for node in nodes:  # the older gpuctl's rollout let KMM load v1 there
        api.label_nodes(node, {version_label(namespace, module): "v1"})
    for node in nodes:
        wait_until(f"v1 loaded on {node}", partial(gpu_nodes.kmm.loaded, module, node))
    since = time.time()
    with running_coordinator(kube_cluster, namespace):
        wait_until(
            "module selects TARGET_LABEL",
            lambda: (
                (api.get_module(namespace, module) or {})["spec"]["selector"]
                == {TARGET_LABEL: name}
            ),
        )
        for node in nodes:
            assert node_label(api, node, TARGET_LABEL) == name
        assert container(api, namespace, module)["version"].startswith("v1-")
        assert "NodesTargeted" in api.event_reasons(driver["metadata"]["uid"])
        # KMM keeps v1 where the version label still says v1: nothing was unloaded.
        wait_status(api, name, lambda s: s.get("kmmStatus") == "2/2", "reports 2/2")
        for node in nodes:
            loaded = gpu_nodes.kmm.loaded(module, node)
            assert loaded is not None
            assert loaded.version == "v1"
        assert gpu_nodes.unloads_since(since) == set()


def test_deletion_unseen_by_kmm_keeps_the_finalizer_while_a_node_is_targeted(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, module, node = f"{namespace}-blip", f"{namespace}-blip-gpu", f"{namespace}-n1"
    gpu_nodes.add("n1", node_labels(namespace))
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace):
        wait_until("module", lambda: api.get_module(namespace, module))
        api.load_as_the_rollout_would(node, name, namespace)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
    discovery = SwitchableKmm(api.kube)  # KMM not seen: the Module is not even read
    with running_coordinator(kube_cluster, namespace, discover=discovery):
        api.delete_driver(name)
        wait_status(api, name, lambda s: s.get("kmmStatus") == "Removing", "is Removing")
        driver = api.get_driver(name)
        assert driver is not None
        assert FINALIZER in driver["metadata"]["finalizers"]
        assert api.get_module(namespace, module) is not None
        assert gpu_nodes.kmm.loaded(module, node) is not None
        api.unload_as_the_rollout_would(node, name, namespace)
        wait_until("gpudriver gone", lambda: api.get_driver(name) is None)
        wait_until("unloaded", lambda: gpu_nodes.kmm.loaded(module, node) is None)
