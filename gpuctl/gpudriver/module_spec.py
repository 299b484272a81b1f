"""GPUDriver → KMM Module: the pure mapping (plain dicts in, a dict out).

One `modules.kmm.sigs.x-k8s.io/v1beta1` Module named `<gpudriver>-gpu` in the coordinator's
namespace, owned by the GPUDriver. The loader container, `pullSecret` → `imageRepoSecret`,
`moduleName` first in the container-level and every per-mapping `inTreeModulesToRemove`, and
build pods placed by the user's node selector are the Intel GPU operator's mapping
(intel/gpu-base-operator pull request #79). Where gpuctl deliberately differs, so that KMM acts
on a node only after gpuctl decided, for that node, that it may (the KMM source each rule is in
is named; docs/kmm-unloads.md shows each against KMM's own operator):

- `selector` is `{gpuctl.dev/driver-target: <gpudriver>}` (TARGET_LABEL), a Node label only
  gpuctl writes (the rollout; the drivers reconciler on nodes an older Module loaded): a node
  leaving the user's selector would otherwise be unloaded at once (module_reconciler.go), so
  gpuctl evaluates that selector itself (gpuctl.gpudriver.targeting).
- `version` is always set, to `kmm_version(spec)`: a digest of everything KMM puts in a node's
  config (nmc_reconciler.go), so any config change is a new version that reaches a
  node only when the rollout moves that node's version label, and the version never
  toggles between empty and set (KMM's webhook refuses that).
- `tolerations` start with `{operator: Exists}`, even with `tolerateAllTaints: false`, so no
  taint makes KMM drop a node from its targets and unload it (internal/node/node.go); which
  tainted nodes get the driver gpuctl decides (gpuctl.gpudriver.tolerations).
- `imageRebuildTriggerGeneration` is passed on but not in the version: KMM reads it only to
  check, build and sign the images again (mic_reconciler.go), never into a node's config.

No I/O here, so every rule is unit-tested with plain data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from gpuctl.common import names
from gpuctl.gpudriver import model
from gpuctl.gpudriver.targeting import node_selector
from gpuctl.gpudriver.tolerations import module_tolerations

MODULE_API_VERSION = f"{names.KMM_GROUP}/{names.KMM_VERSION}"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuctl-coordinator"
# KMM's default for modprobe.dirName; written explicitly so the stored Module equals ours.
KMM_DEFAULT_DIR_NAME = model.KMM_DIR_NAME
# KMM builds node label names from "<namespace>.<module>"; its webhook refuses longer pairs
# (v2.6.0: 40 characters, internal/webhook/module.go maxCombinedLength; main de3f8c9: 41).
KMM_MAX_NAMESPACE_PLUS_NAME = 40
# Hex digits of the config digest in kmm_version: after a user's version (<= 54 characters,
# model.VERSION_MAX_LENGTH) + "-" the value stays within a label value's 63 characters.
VERSION_DIGEST_HEX = 8
UNVERSIONED_DIGEST_HEX = 12
UNVERSIONED_PREFIX = "cfg"


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
    """The node label that lets KMM load a given `version` on that node (ordered upgrade);
    its name's one home is gpuctl.common.names, shared with `gpuctl rollout plan`."""
    return names.kmm_version_label(namespace, module)


def _with_module_first(module: str, extra: list[str] | None) -> list[str]:
    ordered = [module]
    for name in extra or []:
        if name not in ordered:
            ordered.append(name)
    return ordered


def _tls(tls: Mapping[str, Any] | None) -> dict[str, bool] | None:
    if not tls:
        return None
    return {k: bool(tls[k]) for k in ("insecure", "insecureSkipTLSVerify") if k in tls}


def _build(build: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"dockerfileConfigMap": {"name": build["dockerfileConfigMap"]["name"]}}
    if build.get("buildArgs"):
        out["buildArgs"] = [{"name": a["name"], "value": a["value"]} for a in build["buildArgs"]]
    if build.get("secrets"):
        out["secrets"] = [{"name": s["name"]} for s in build["secrets"]]
    return out


def _sign(sign: Mapping[str, Any]) -> dict[str, Any]:
    """KMM's `sign`, as the GPUDriver has it (the same fields)."""
    out: dict[str, Any] = {
        "keySecret": {"name": sign["keySecret"]["name"]},
        "certSecret": {"name": sign["certSecret"]["name"]},
        "filesToSign": list(sign["filesToSign"]),
    }
    if sign.get("unsignedImage"):
        out["unsignedImage"] = sign["unsignedImage"]
    tls = _tls(sign.get("unsignedImageRegistryTLS"))
    if tls is not None:
        out["unsignedImageRegistryTLS"] = tls
    return out


def _mapping(mapping: Mapping[str, Any], module: str) -> dict[str, Any]:
    out: dict[str, Any] = {"regexp": mapping["regexp"]}
    if mapping.get("containerImage"):
        out["containerImage"] = mapping["containerImage"]
    if mapping.get("build"):
        out["build"] = _build(mapping["build"])
    if mapping.get("sign"):
        out["sign"] = _sign(mapping["sign"])
    tls = _tls(mapping.get("registryTLS"))
    if tls is not None:
        out["registryTLS"] = tls
    out["inTreeModulesToRemove"] = _with_module_first(module, mapping.get("inTreeModulesToRemove"))
    return out


def _loader_config(kernel_module: Mapping[str, Any]) -> dict[str, Any]:
    """The loader container's config: everything KMM puts in a node's config, so the
    container spec without `version` and without the builds' `selector` (where builds run)."""
    module = kernel_module.get("moduleName") or model.DEFAULT_MODULE_NAME
    modprobe: dict[str, Any] = {"moduleName": module, "dirName": KMM_DEFAULT_DIR_NAME}
    if kernel_module.get("parameters"):
        modprobe["parameters"] = list(kernel_module["parameters"])
    if kernel_module.get("firmwarePath"):
        modprobe["firmwarePath"] = kernel_module["firmwarePath"]
    if kernel_module.get("modulesLoadingOrder"):
        modprobe["modulesLoadingOrder"] = list(kernel_module["modulesLoadingOrder"])
    container: dict[str, Any] = {
        "modprobe": modprobe,
        "inTreeModulesToRemove": [module],
        "kernelMappings": [_mapping(m, module) for m in kernel_module["kernelMappings"]],
    }
    tls = _tls(kernel_module.get("registryTLS"))
    if tls is not None:
        container["registryTLS"] = tls
    if kernel_module.get("sign"):
        container["sign"] = _sign(kernel_module["sign"])
    return container


def _kernel_module(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    kernel_module = spec.get("kernelModule")
    if not kernel_module:
        raise ValueError("the GPUDriver spec has no kernelModule: it asks for no Module")
    return dict(kernel_module)


def kmm_version(spec: Mapping[str, Any]) -> str:
    """The Module's `version` for a GPUDriver spec that has a kernelModule.

    `<kernelModule.version>-<8 hex>`, or `cfg-<12 hex>` without a version; the hex digits are
    the start of a sha256 over the canonical JSON of the loader config (`_loader_config`):
    every field of a node's config and nothing else, so tolerations, selectors, the pull
    secret, the service account and the rollout settings do not change it. Whatever the
    coordinator adds to that config later changes the digest too: the safe direction (a new
    version rolls out node by node; a missed field would reach every node at once). A valid
    label value: the rollout writes it on Nodes (KMM's version label).
    """
    kernel_module = _kernel_module(spec)
    canonical = json.dumps(_loader_config(kernel_module), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    version = kernel_module.get("version")
    if version:
        return f"{version}-{digest[:VERSION_DIGEST_HEX]}"
    return f"{UNVERSIONED_PREFIX}-{digest[:UNVERSIONED_DIGEST_HEX]}"


def target_selector(driver_name: str) -> dict[str, str]:
    """The Module's selector: the Nodes the rollout labelled for this GPUDriver."""
    return {names.TARGET_LABEL: driver_name}


def module_spec(
    driver_name: str, spec: Mapping[str, Any], loader_service_account: str | None = None
) -> dict[str, Any]:
    """The Module's spec for a GPUDriver spec that has a kernelModule.

    `loader_service_account` names the ServiceAccount of KMM's module loader pods (the chart's
    OpenShift SCC is bound to it); None leaves KMM's default.
    """
    container = _loader_config(_kernel_module(spec))
    builds_on = node_selector(spec)
    for mapping in container["kernelMappings"]:
        if "build" in mapping:
            mapping["build"]["selector"] = dict(builds_on)
    container["version"] = kmm_version(spec)
    loader: dict[str, Any] = {"container": container}
    if loader_service_account:
        loader["serviceAccountName"] = loader_service_account
    out: dict[str, Any] = {"moduleLoader": loader, "selector": target_selector(driver_name)}
    pull_secret = (spec.get("pullSecret") or {}).get("name")
    if pull_secret:
        out["imageRepoSecret"] = {"name": pull_secret}
    out["tolerations"] = module_tolerations(spec)
    rebuild = _kernel_module(spec).get("imageRebuildTriggerGeneration")
    if rebuild is not None:
        out["imageRebuildTriggerGeneration"] = rebuild  # images only: no node's config
    return out


def desired_module(
    driver: Mapping[str, Any], namespace: str, loader_service_account: str | None = None
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
        "spec": module_spec(meta["name"], spec, loader_service_account),
    }


def stored_version(module: Mapping[str, Any]) -> str:
    """The `version` a stored Module asks for ("" when it has none)."""
    container = ((module.get("spec") or {}).get("moduleLoader") or {}).get("container") or {}
    return str(container.get("version") or "")


def stored_mappings(module: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A stored Module's kernel mappings."""
    container = ((module.get("spec") or {}).get("moduleLoader") or {}).get("container") or {}
    return list(container.get("kernelMappings") or [])
