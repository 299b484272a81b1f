"""Plain-data GPUDrivers, Modules, Nodes and ResourceClaims shared by the unit tests."""

from __future__ import annotations

import copy
from typing import Any

NAMESPACE = "gpuctl-system"
UID = "0b1e6f5a-1111-2222-3333-444455556666"


def driver(
    name: str = "gpu-policy",
    spec: dict[str, Any] | None = None,
    *,
    uid: str = UID,
    created: str = "2026-11-01T10:00:00Z",
    generation: int = 1,
    finalizers: list[str] | None = None,
    deleting: bool = False,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": uid,
        "creationTimestamp": created,
        "generation": generation,
        "resourceVersion": "7",
    }
    if finalizers is not None:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-11-02T10:00:00Z"
    obj: dict[str, Any] = {
        "apiVersion": "gpuctl.dev/v1alpha1",
        "kind": "GPUDriver",
        "metadata": meta,
        "spec": copy.deepcopy(spec) if spec is not None else minimal_spec(),
    }
    if status is not None:
        obj["status"] = status
    return obj


def minimal_spec() -> dict[str, Any]:
    """The PR's minimal usage: one image for every kernel (moduleName defaulted)."""
    return {
        "kernelModule": {
            "moduleName": "xe",
            "kernelMappings": [
                {"regexp": "^.+$", "containerImage": "registry.example.com/xe-driver:1.0"}
            ],
        }
    }


def full_spec() -> dict[str, Any]:
    """Every field of the reference set."""
    return {
        "pullSecret": {"name": "my-registry"},
        "nodeSelector": {"gpu-hw-wo-driver": "true"},
        "tolerations": [
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "maint",
                "operator": "Equal",
                "value": "x",
                "effect": "NoExecute",
                "tolerationSeconds": 30,
            },
        ],
        "kernelModule": {
            "moduleName": "xe",
            "version": "v7.1.4.6_260728.7",
            "firmwarePath": "/firmware",
            "modulesLoadingOrder": ["xe", "drm_gpuvm", "drm_buddy"],
            "registryTLS": {"insecure": False, "insecureSkipTLSVerify": True},
            "kernelMappings": [
                {
                    "regexp": "^7\\.0\\.0-.*-generic$",
                    "containerImage": "reg.example.com/xe:v7.1.4.6-$KERNEL_FULL_VERSION",
                    "build": {
                        "dockerfileConfigMap": {"name": "xe-build-u26.04"},
                        "buildArgs": [{"name": "XE_TAG", "value": "xebr_v7.1.4.6_260728.7"}],
                        "secrets": [{"name": "private-repo"}],
                    },
                    "registryTLS": {"insecure": True},
                    "inTreeModulesToRemove": ["i915", "xe", "i915"],
                },
                {"regexp": "^6\\.12\\..*", "containerImage": "reg.example.com/xe-rhel10:1.0"},
            ],
        },
    }


def node(
    name: str, labels: dict[str, str] | None = None, *, kernel: str | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "labels": dict(labels or {})}}
    if kernel is not None:
        obj["status"] = {"nodeInfo": {"kernelVersion": kernel}}
    return obj


GPU_NODE_LABELS = {"kubernetes.io/arch": "amd64"}


def claim(
    name: str,
    node_name: str | None,
    *,
    namespace: str = "apps",
    driver_name: str = "gpu.intel.com",
    allocated: bool = True,
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "status": {}}
    if not allocated:
        return obj
    allocation: dict[str, Any] = {
        "devices": {
            "results": [{"request": "gpu", "driver": driver_name, "pool": "p", "device": "card0"}]
        }
    }
    if node_name is not None:
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        }
    obj["status"]["allocation"] = allocation
    return obj


def module(
    name: str = "gpu-policy-gpu",
    spec: dict[str, Any] | None = None,
    *,
    owner_uid: str = UID,
    available: int | None = None,
    desired: int | None = None,
    deleting_since: str | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
        "kind": "Module",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": "mod-uid",
            "ownerReferences": [{"kind": "GPUDriver", "name": "gpu-policy", "uid": owner_uid}],
        },
        "spec": spec or {"selector": {"kubernetes.io/arch": "amd64"}},
    }
    if available is not None or desired is not None:
        obj["status"] = {
            "moduleLoader": {"availableNumber": available or 0, "desiredNumber": desired or 0}
        }
    if deleting_since:
        obj["metadata"]["deletionTimestamp"] = deleting_since
    return obj


def kmm_node_config_crd(*, boot_id: bool = True) -> dict[str, Any]:
    """KMM's NodeModulesConfig CRD, reduced to what tells its versions apart: from v2.4.0 its
    status entries have a `bootId` (gpuctl/gpudriver/kmm_support.py)."""
    fields: dict[str, Any] = {"name": {"type": "string"}, "namespace": {"type": "string"}}
    if boot_id:
        fields["bootId"] = {"type": "string"}
    status = {"properties": {"modules": {"items": {"properties": fields}, "type": "array"}}}
    schema = {"openAPIV3Schema": {"properties": {"status": status}, "type": "object"}}
    return {
        "metadata": {"name": "nodemodulesconfigs.kmm.sigs.x-k8s.io"},
        "spec": {"versions": [{"name": "v1beta1", "served": True, "schema": schema}]},
    }
