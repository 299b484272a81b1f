"""GPUDriver → KMM Module: the pure mapping (plain dicts in, a dict out).

Exactly the mapping of the Intel GPU operator's KMM integration (../shared/seeds/):
one `modules.kmm.sigs.x-k8s.io/v1beta1` Module named `<gpudriver>-gpu` in the coordinator's
namespace, owned by the GPUDriver; `pullSecret` → `imageRepoSecret`; selector = `nodeSelector`
+ `kubernetes.io/arch: amd64`, or with `useNFDLabeling` the NFD `gpu-pci` label; tolerations
copied, plus always the cordon taint's (see CORDON_TOLERATION); `moduleName` first in the
container-level and every per-mapping `inTreeModulesToRemove`; build pods use the Module's
selector. No I/O here, so every rule is unit-tested with plain data.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from coordinator.drivers import model
from gpuctl.common import names
from gpuctl.common.targeting import node_selector

MODULE_API_VERSION = f"{names.KMM_GROUP}/{names.KMM_VERSION}"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuctl-coordinator"
# Cordoning a node makes the node-lifecycle controller taint it
# `node.kubernetes.io/unschedulable:NoSchedule`, and KMM stops targeting a node with a taint
# the Module does not tolerate: it would unload the driver. The rollout cordons nodes (and
# admins cordon them for other reasons), so the Module always tolerates that taint.
CORDON_TOLERATION = {
    "key": "node.kubernetes.io/unschedulable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
# KMM's default for modprobe.dirName; written explicitly so the stored Module equals ours.
KMM_DEFAULT_DIR_NAME = "/opt"
# KMM builds node label names from "<namespace>.<module>"; it refuses longer pairs.
KMM_MAX_NAMESPACE_PLUS_NAME = 41


def module_name(driver_name: str) -> str:
    """The Module's name for a GPUDriver."""
    return f"{driver_name}-gpu"


def module_ref(module: str) -> str:
    """How the reference names a Module in status errors."""
    return f"{names.KMM_MODULE_PLURAL}.{names.KMM_GROUP}/{module}"


def ready_label(namespace: str, module: str) -> str:
    """The node label KMM sets once the module is loaded (gate GPU DaemonSets on it)."""
    return f"kmm.node.kubernetes.io/{namespace}.{module}.ready"


def version_label(namespace: str, module: str) -> str:
    """The node label that lets KMM load a given `version` on that node (ordered upgrade)."""
    return f"kmm.node.kubernetes.io/version-module.{namespace}.{module}"


def _with_module_first(module: str, extra: list[str] | None) -> list[str]:
    ordered = [module]
    for name in extra or []:
        if name not in ordered:
            ordered.append(name)
    return ordered


def _tls(tls: dict[str, Any] | None) -> dict[str, bool] | None:
    if not tls:
        return None
    return {k: bool(tls[k]) for k in ("insecure", "insecureSkipTLSVerify") if k in tls}


def _build(build: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dockerfileConfigMap": {"name": build["dockerfileConfigMap"]["name"]},
        "selector": dict(selector),
    }
    if build.get("buildArgs"):
        out["buildArgs"] = [{"name": a["name"], "value": a["value"]} for a in build["buildArgs"]]
    if build.get("secrets"):
        out["secrets"] = [{"name": s["name"]} for s in build["secrets"]]
    return out


def _mapping(mapping: dict[str, Any], module: str, selector: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"regexp": mapping["regexp"]}
    if mapping.get("containerImage"):
        out["containerImage"] = mapping["containerImage"]
    if mapping.get("build"):
        out["build"] = _build(mapping["build"], selector)
    tls = _tls(mapping.get("registryTLS"))
    if tls is not None:
        out["registryTLS"] = tls
    out["inTreeModulesToRemove"] = _with_module_first(module, mapping.get("inTreeModulesToRemove"))
    return out


def module_spec(spec: dict[str, Any], loader_service_account: str | None = None) -> dict[str, Any]:
    """The Module's spec for a GPUDriver spec that has a kernelModule.

    `loader_service_account` names the ServiceAccount of KMM's module loader pods (the chart's
    OpenShift SCC is bound to it); None leaves KMM's default.
    """
    kernel_module: dict[str, Any] = spec["kernelModule"]
    module = kernel_module.get("moduleName") or model.DEFAULT_MODULE_NAME
    selector = node_selector(spec)
    modprobe: dict[str, Any] = {"moduleName": module, "dirName": KMM_DEFAULT_DIR_NAME}
    if kernel_module.get("firmwarePath"):
        modprobe["firmwarePath"] = kernel_module["firmwarePath"]
    if kernel_module.get("modulesLoadingOrder"):
        modprobe["modulesLoadingOrder"] = list(kernel_module["modulesLoadingOrder"])
    container: dict[str, Any] = {
        "modprobe": modprobe,
        "inTreeModulesToRemove": [module],
        "kernelMappings": [_mapping(m, module, selector) for m in kernel_module["kernelMappings"]],
    }
    if kernel_module.get("version"):
        container["version"] = kernel_module["version"]
    tls = _tls(kernel_module.get("registryTLS"))
    if tls is not None:
        container["registryTLS"] = tls
    loader: dict[str, Any] = {"container": container}
    if loader_service_account:
        loader["serviceAccountName"] = loader_service_account
    out: dict[str, Any] = {"moduleLoader": loader, "selector": selector}
    pull_secret = (spec.get("pullSecret") or {}).get("name")
    if pull_secret:
        out["imageRepoSecret"] = {"name": pull_secret}
    tolerations = copy.deepcopy(spec.get("tolerations") or [])
    if CORDON_TOLERATION not in tolerations:
        tolerations.append(dict(CORDON_TOLERATION))
    out["tolerations"] = tolerations
    return out


def _node_config(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Everything of a GPUDriver spec that KMM puts in a node's NodeModulesConfig config
    (rules N2/M6): the Module's container without `version`, and builds without their node
    selector (tolerations, selector, pull secret and service account are not in it)."""
    container: dict[str, Any] = copy.deepcopy(module_spec(dict(spec))["moduleLoader"]["container"])
    container.pop("version", None)
    for mapping in container.get("kernelMappings") or []:
        if isinstance(mapping.get("build"), dict):
            mapping["build"].pop("selector", None)
    return container


def kmm_version(spec: Mapping[str, Any]) -> str:
    """The Module's `version` for a GPUDriver spec with a kernelModule: always set (KMM refuses
    toggling between empty and set, rule H1), and new for any change of a node's config, so
    every such change goes node by node through the rollout's checks (rule V1).

    `<kernelModule.version>-<8 hex>` when a version is set, else `cfg-<12 hex>`; the hex is a
    sha256 digest of the canonical JSON of the node config (`_node_config`).
    """
    canonical = json.dumps(_node_config(spec), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    version = (spec.get("kernelModule") or {}).get("version")
    return f"{version}-{digest[:8]}" if version else f"cfg-{digest[:12]}"


def desired_module(
    driver: dict[str, Any], namespace: str, loader_service_account: str | None = None
) -> dict[str, Any] | None:
    """The whole Module object for a GPUDriver object, or None without a kernelModule."""
    spec = driver.get("spec") or {}
    if not spec.get("kernelModule"):
        return None
    meta = driver["metadata"]
    return {
        "apiVersion": MODULE_API_VERSION,
        "kind": "Module",
        "metadata": {
            "name": module_name(meta["name"]),
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, names.DRIVER_LABEL: meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": f"{names.GROUP}/{names.VERSION}",
                    "kind": names.GPUDRIVER_KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": module_spec(spec, loader_service_account),
    }


def version_toggled(current_module_spec: dict[str, Any], desired_spec: dict[str, Any]) -> bool:
    """True when `version` goes between empty and set: KMM refuses that in place."""
    current = current_module_spec.get("moduleLoader", {}).get("container", {}).get("version")
    desired = desired_spec.get("moduleLoader", {}).get("container", {}).get("version")
    return bool(current) != bool(desired)


def spec_differs(current_module_spec: dict[str, Any], desired_spec: dict[str, Any]) -> bool:
    """True when the stored Module's spec is not the one gpuctl would write."""
    return current_module_spec != desired_spec
