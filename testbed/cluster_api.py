"""Plain-dict access to the test cluster's API server, and the GPUDrivers tests make there.

Everything here talks to the real test API server (testbed/harness); nothing is mocked. Each
test's GPUDrivers carry the label `gpuctl.test/ns=<namespace>` and its coordinator
(coordinator_thread.py) manages only those (`driver_selector`), so tests sharing the
session's cluster never see each other's GPUDrivers; the Modules, Lease and pull secrets
live in the test's namespace.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from coordinator.kube.discovery import ServedGroups, api_discovery
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import kmm_version, module_name, version_label
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until

TEST_LABEL = "gpuctl.test/ns"
TEST_REPOSITORY = "registry.example.com/xe"


def mapped_image(tag: str) -> str:
    """A kernel mapping's image as fleets write it: `tag` for each node's kernel, which KMM
    fills in (`$KERNEL_FULL_VERSION`); tests/support/gpu_nodes.py pushes one per kernel."""
    return f"{TEST_REPOSITORY}:{tag}-$KERNEL_FULL_VERSION"


GROUP, VERSION, PLURAL = names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL
KMM = (names.KMM_GROUP, names.KMM_VERSION, names.KMM_MODULE_PLURAL)


class Api:
    """Plain-dict access to the test API server as admin."""

    def __init__(self, cluster: KubeCluster) -> None:
        self._client = cluster.admin_client()
        self.kube = Kube(self._client)

    def close(self) -> None:
        self._client.close()

    def driver_path(self, name: str | None = None) -> str:
        return path(GROUP, VERSION, PLURAL, name=name)

    def get_driver(self, name: str) -> dict[str, Any] | None:
        return self._get(self.driver_path(name))

    def create_driver(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.kube.request("POST", self.driver_path(), body=body)

    def patch_driver(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.kube.request(
            "PATCH", self.driver_path(name), body=patch, content_type=MERGE_PATCH
        )

    def delete_driver(self, name: str) -> None:
        with contextlib.suppress(KubeError):
            self.kube.request("DELETE", self.driver_path(name))

    def module_path(self, namespace: str, name: str | None = None) -> str:
        return path(*KMM, namespace=namespace, name=name)

    def images_config_path(self, namespace: str, name: str | None = None) -> str:
        """KMM's ModuleImagesConfig of a Module (KMM names it after the Module)."""
        return path(KMM[0], KMM[1], names.KMM_IMAGES_CONFIG_PLURAL, namespace=namespace, name=name)

    def get_module(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(self.module_path(namespace, name))

    def _get(self, resource_path: str) -> dict[str, Any] | None:
        try:
            return self.kube.request("GET", resource_path)
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def events_for(self, uid: str) -> list[dict[str, Any]]:
        answer = self.kube.request(
            "GET",
            path("", "v1", "events"),
            query={"fieldSelector": f"involvedObject.uid={uid}"},
        )
        return list(answer.get("items") or [])

    def event_reasons(self, uid: str) -> set[str]:
        return {e["reason"] for e in self.events_for(uid)}

    def create_claim(self, namespace: str, name: str, node: str, version: str = "v1") -> None:
        """A ResourceClaim of gpu.intel.com in DRA `version`, allocated on `node` (as the DRA
        scheduler would). v1 and v1beta2 wrap a request's device class in `exactly`; v1beta1
        and 1.31's v1alpha3 do not; the allocation is the same in all four."""
        claims = path("resource.k8s.io", version, "resourceclaims", namespace=namespace)
        device_class = {"deviceClassName": "gpu.intel.com"}
        request = {
            "name": "gpu",
            **(device_class if version in ("v1beta1", "v1alpha3") else {"exactly": device_class}),
        }
        self.kube.request(
            "POST",
            claims,
            body={
                "apiVersion": f"resource.k8s.io/{version}",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"devices": {"requests": [request]}},
            },
        )
        allocation = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.intel.com", "pool": node, "device": "card0"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        self.kube.request(
            "PATCH",
            f"{claims}/{name}/status",
            body={"status": {"allocation": allocation}},
            content_type=MERGE_PATCH,
        )

    def label_node(self, node: str, key: str, value: str | None) -> None:
        self.kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node),
            body={"metadata": {"labels": {key: value}}},
            content_type=MERGE_PATCH,
        )

    def load_as_the_rollout_would(self, node: str, driver: str, namespace: str) -> None:
        """The rollout's Loading write (coordinator/rollout), played by a test of the GPUDriver
        controller: TARGET_LABEL=<driver> and KMM's version label at the Module's version
        (kmm_version of the GPUDriver's stored spec), in one patch. KMM then loads the node."""
        stored = self.get_driver(driver)
        assert stored is not None, f"no GPUDriver {driver}"
        module = module_name(driver)
        self.label_nodes(
            node,
            {
                names.TARGET_LABEL: driver,
                version_label(namespace, module): kmm_version(stored["spec"]),
            },
        )

    def unload_as_the_rollout_would(self, node: str, driver: str, namespace: str) -> None:
        """The rollout's Unloading write, played by a test: TARGET_LABEL and KMM's version
        label removed in one patch. KMM then unloads the node."""
        module = module_name(driver)
        self.label_nodes(node, {names.TARGET_LABEL: None, version_label(namespace, module): None})

    def label_nodes(self, node: str, labels: dict[str, str | None]) -> None:
        """One merge patch of `node`'s labels (None removes one)."""
        self.kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node),
            body={"metadata": {"labels": labels}},
            content_type=MERGE_PATCH,
        )

    def delete_claim(self, namespace: str, name: str, version: str = "v1") -> None:
        claim = path("resource.k8s.io", version, "resourceclaims", namespace=namespace, name=name)
        self.kube.request("DELETE", claim)


class SwitchableKmm:
    """The real server's discovery, with the KMM group hidden while `hidden` is set (a
    coordinator's `discover`): KMM "not installed", or a discovery blip, without touching
    the session's KMM CRD."""

    def __init__(self, kube: Kube) -> None:
        self._real = api_discovery(kube)
        self.hidden = threading.Event()
        self.hidden.set()

    def __call__(self) -> ServedGroups:
        groups = self._real()
        if self.hidden.is_set():
            groups.pop(names.KMM_GROUP, None)
        return groups


def gpudriver(
    name: str, namespace: str, spec: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A GPUDriver body labeled for the test's coordinator."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUDriver",
        "metadata": {"name": name, "labels": {TEST_LABEL: namespace, **(labels or {})}},
        "spec": spec,
    }


def node_labels(namespace: str, **extra: str) -> dict[str, str]:
    """Labels of a test node a test GPUDriver's `nodeSelector: {gpuctl.test/ns: <ns>}` selects."""
    return {"kubernetes.io/arch": "amd64", TEST_LABEL: namespace, **extra}


def simple_spec(namespace: str, image: str | None = None) -> dict[str, Any]:
    """A GPUDriver spec selecting the test's nodes, every kernel mapped to `image` (by default
    mapped_image("1.0"))."""
    image = image or mapped_image("1.0")
    return {
        "nodeSelector": {TEST_LABEL: namespace},
        "kernelModule": {"kernelMappings": [{"regexp": "^.+$", "containerImage": image}]},
    }


def remove_test_drivers(api: Api, namespace: str) -> None:
    """Teardown: delete the test's GPUDrivers, dropping finalizers no coordinator released."""
    answer = api.kube.request(
        "GET", api.driver_path(), query={"labelSelector": f"{TEST_LABEL}={namespace}"}
    )
    for driver in answer.get("items") or []:
        name = driver["metadata"]["name"]
        api.delete_driver(name)
        with contextlib.suppress(KubeError):
            api.patch_driver(name, {"metadata": {"finalizers": None}})


def status_of(api: Api, name: str) -> dict[str, Any]:
    driver = api.get_driver(name)
    return dict((driver or {}).get("status") or {})


def wait_status(
    api: Api,
    name: str,
    probe: Callable[[dict[str, Any]], bool],
    description: str,
    timeout: float = 20.0,
) -> dict[str, Any]:
    """Waits until the GPUDriver's status satisfies `probe`; returns that status."""

    def check() -> dict[str, Any] | None:
        status = status_of(api, name)
        return status if probe(status) else None

    try:
        return wait_until(f"{name} {description}", check, timeout_seconds=timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}; status now: {json.dumps(status_of(api, name))}") from None
