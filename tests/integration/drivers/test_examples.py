"""Every example in examples/ is accepted by the test API server and by the coordinator.

Each file is applied as an admin would (`kubectl apply -f`), with the test's names: the
ConfigMap in the coordinator's namespace, the GPUDriver renamed and labelled for the test's
coordinator. The API server accepts them (schema and CEL), and the coordinator validates the
GPUDriver, writes its Module (KMM's real CRD accepts it) and reports no error. The build
example's ConfigMap is the one its GPUDriver names, and its rollout block states the defaults
it claims to state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.kube.client import path
from gpuctl.gpudriver import model
from gpuctl.gpudriver.module_spec import module_name
from testbed.cluster_api import TEST_LABEL, Api, wait_status
from testbed.harness.access import KubeCluster
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DRIVER_FILES = sorted(p.name for p in EXAMPLES.glob("xe-driver-*.yaml"))
BUILD_CONFIGMAP = EXAMPLES / "xe-build-configmap-ubuntu-26.04.yaml"


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc]


def test_there_are_examples_to_test() -> None:
    assert DRIVER_FILES == [
        "xe-driver-kernel-upgrade.yaml",
        "xe-driver-prebuilt-image.yaml",
        "xe-driver-secure-boot-signed.yaml",
        "xe-driver-ubuntu-26.04-build.yaml",
    ]


@pytest.mark.parametrize("file", DRIVER_FILES)
def test_an_example_gpudriver_is_accepted_and_gets_its_module(
    kube_cluster: KubeCluster, *, api: Api, namespace: str, file: str
) -> None:
    for configmap in documents(BUILD_CONFIGMAP.name):
        configmap["metadata"]["namespace"] = namespace
        api.kube.request("POST", path("", "v1", "configmaps", namespace=namespace), body=configmap)
    (driver,) = documents(file)
    name = f"{namespace}-{driver['metadata']['name']}"
    driver["metadata"] = {"name": name, "labels": {TEST_LABEL: namespace}}
    api.create_driver(driver)
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(
            api, name, lambda s: s.get("kmmStatus") == "0/0", "has its Module", timeout=30
        )
    assert status["errors"] == []
    module = api.get_module(namespace, module_name(name))
    assert module is not None
    container = module["spec"]["moduleLoader"]["container"]
    kernel_module = driver["spec"]["kernelModule"]
    assert (
        container["kernelMappings"][0]["containerImage"]
        == (kernel_module["kernelMappings"][0]["containerImage"])
    )
    # KMM's real CRD stored the signing settings as the GPUDriver has them.
    assert container.get("sign") == kernel_module.get("sign")
    assert container["kernelMappings"][0].get("sign") == (
        kernel_module["kernelMappings"][0].get("sign")
    )


def test_the_build_example_names_its_configmap_and_states_the_defaults_it_claims() -> None:
    (configmap,) = documents(BUILD_CONFIGMAP.name)
    (driver,) = documents("xe-driver-ubuntu-26.04-build.yaml")
    build = driver["spec"]["kernelModule"]["kernelMappings"][0]["build"]
    assert build["dockerfileConfigMap"]["name"] == configmap["metadata"]["name"]
    dockerfile = configmap["data"]["dockerfile"]
    assert "/opt/lib/modules/${KERNEL_FULL_VERSION}/" in dockerfile
    assert "depmod -b /opt ${KERNEL_FULL_VERSION}" in dockerfile
    declared = {
        line.split()[1].split("=")[0] for line in dockerfile.splitlines() if line.startswith("ARG")
    }
    assert {a["name"] for a in build["buildArgs"]} <= declared
    defaults = model.Rollout().model_dump(
        by_alias=True, mode="json", exclude={"paused"}, exclude_none=True
    )
    stated = driver["spec"]["rollout"]
    # "these are the defaults except where a comment says otherwise": only timeouts.load.
    assert {**stated, "timeouts": {**stated["timeouts"], "load": "10m"}} == defaults
