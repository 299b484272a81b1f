"""KMM's objects as the emulator sees them: plain, frozen data read from the API's JSON.

The rules that act on these live in ``kmm_scheduling.py`` (Module reconciler), ``kmm_nmc.py``
(NodeModulesConfig reconciler), ``kmm_versions.py`` (ordered-upgrade labels) and
``kmm_worker.py`` (what a worker Pod does on the host); the I/O is ``kmm_emulator.py``. Rule
ids (N1, M4, ...) are those of the KMM rules notes; the files named are KMM's
(kubernetes-sigs/kernel-module-management, v2.6.0 unless said otherwise).

``ModuleConfig`` is api/v1beta1/nodemodulesconfig_types.go's ModuleConfig field for field, and
is compared whole (N2: reflect.DeepEqual). ``SpecEntry``/``StatusEntry`` are the NMC's
NodeModuleSpec/NodeModuleStatus: the ModuleItem fields (tolerations, version, pull secret,
service account) are beside the config, never part of it. One difference from Go, on purpose:
an empty list and an absent one are the same here (Go's DeepEqual tells nil from empty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names

GROUP = names.KMM_GROUP
VERSION = names.KMM_VERSION
PLURAL = names.KMM_MODULE_PLURAL
# internal/constants/constants.go :: ModuleFinalizer
FINALIZER = "kmm.node.kubernetes.io/module-finalizer"
# api/v1beta1/module_types.go: the CRD default of modprobe.dirName
DEFAULT_DIR_NAME = "/opt"
# module_reconciler.go :: enableModuleOnNode (nmc helper SetModuleConfig): SA default
DEFAULT_SERVICE_ACCOUNT = "default"

Tolerations = tuple[Mapping[str, Any], ...]


def ready_label(namespace: str, name: str) -> str:
    """internal/utils/kmmlabels.go :: GetKernelModuleReadyNodeLabel (N7)."""
    return f"kmm.node.kubernetes.io/{namespace}.{name}.ready"


def version_ready_label(namespace: str, name: str) -> str:
    """internal/utils/kmmlabels.go :: GetKernelModuleVersionReadyNodeLabel (N7)."""
    return f"kmm.node.kubernetes.io/{namespace}.{name}.version.ready"


def version_module_label(namespace: str, name: str) -> str:
    """The admin's requested version (kmmlabels.go :: GetModuleVersionLabelName, V1)."""
    return f"kmm.node.kubernetes.io/version-module.{namespace}.{name}"


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value or ())


@dataclass(frozen=True)
class ModprobeArgs:
    """api/v1beta1/module_types.go :: ModprobeArgs."""

    load: tuple[str, ...]
    unload: tuple[str, ...]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any] | None) -> ModprobeArgs | None:
        if obj is None:
            return None
        return cls(load=_strings(obj.get("load")), unload=_strings(obj.get("unload")))


@dataclass(frozen=True)
class Modprobe:
    """api/v1beta1/module_types.go :: ModprobeSpec, every field (it is part of the config)."""

    module_name: str = ""
    parameters: tuple[str, ...] = ()
    dir_name: str = DEFAULT_DIR_NAME
    args: ModprobeArgs | None = None
    raw_args: ModprobeArgs | None = None
    firmware_path: str = ""
    modules_loading_order: tuple[str, ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Modprobe:
        return cls(
            module_name=obj.get("moduleName", "") or "",
            parameters=_strings(obj.get("parameters")),
            dir_name=obj.get("dirName") or DEFAULT_DIR_NAME,
            args=ModprobeArgs.from_object(obj.get("args")),
            raw_args=ModprobeArgs.from_object(obj.get("rawArgs")),
            firmware_path=obj.get("firmwarePath", "") or "",
            modules_loading_order=_strings(obj.get("modulesLoadingOrder")),
        )


@dataclass(frozen=True)
class ModuleConfig:
    """nodemodulesconfig_types.go :: ModuleConfig; equality is KMM's whole-config DeepEqual (N2).

    ``in_tree_module_to_remove`` (deprecated) is never set by the Module reconciler, which
    folds it into the list (kernelmapper.go :: prepareModuleLoaderData); kept for completeness.
    """

    kernel_version: str
    container_image: str
    image_pull_policy: str = ""
    insecure_pull: bool = False
    in_tree_modules_to_remove: tuple[str, ...] = ()
    in_tree_module_to_remove: str = ""
    modprobe: Modprobe = Modprobe()


@dataclass(frozen=True)
class SpecEntry:
    """nodemodulesconfig_types.go :: NodeModuleSpec (ModuleItem + config), written by M6."""

    config: ModuleConfig
    version: str = ""
    tolerations: Tolerations = ()
    image_repo_secret: str | None = None
    service_account: str = DEFAULT_SERVICE_ACCOUNT


@dataclass(frozen=True)
class StatusEntry:
    """nodemodulesconfig_types.go :: NodeModuleStatus, written by a Succeeded loader (N6)."""

    config: ModuleConfig
    version: str = ""
    tolerations: Tolerations = ()
    image_repo_secret: str | None = None
    service_account: str = DEFAULT_SERVICE_ACCOUNT
    boot_id: str = ""


@dataclass(frozen=True)
class Loaded:
    """What KMM reports loaded on a node: the status entry's version and image."""

    version: str
    container_image: str


@dataclass(frozen=True)
class KernelMapping:
    """api/v1beta1/module_types.go :: KernelMapping (the fields that reach the NMC)."""

    literal: str = ""
    regexp: str = ""
    container_image: str = ""
    in_tree_modules_to_remove: tuple[str, ...] | None = None
    in_tree_module_to_remove: str = ""
    registry_tls: Mapping[str, Any] | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> KernelMapping:
        in_tree = obj.get("inTreeModulesToRemove")
        return cls(
            literal=obj.get("literal", "") or "",
            regexp=obj.get("regexp", "") or "",
            container_image=obj.get("containerImage", "") or "",
            in_tree_modules_to_remove=None if in_tree is None else _strings(in_tree),
            in_tree_module_to_remove=obj.get("inTreeModuleToRemove", "") or "",
            registry_tls=obj.get("registryTLS"),
        )


@dataclass(frozen=True)
class ModuleView:
    """The parts of a Module that decide where and what KMM loads (module_types.go)."""

    namespace: str
    name: str
    selector: Mapping[str, str]
    tolerations: Tolerations
    deleting: bool
    has_module_loader: bool
    version: str = ""
    container_image: str = ""
    image_pull_policy: str = ""
    in_tree_modules_to_remove: tuple[str, ...] = ()
    in_tree_module_to_remove: str = ""
    registry_tls: Mapping[str, Any] | None = None
    modprobe: Modprobe = Modprobe()
    kernel_mappings: tuple[KernelMapping, ...] = ()
    image_repo_secret: str | None = None
    service_account: str = ""

    @classmethod
    def from_object(cls, module: Mapping[str, Any]) -> ModuleView:
        metadata = module["metadata"]
        spec = module.get("spec") or {}
        loader = spec.get("moduleLoader")
        container = (loader or {}).get("container") or {}
        return cls(
            namespace=metadata["namespace"],
            name=metadata["name"],
            selector=dict(spec.get("selector") or {}),
            tolerations=tuple(spec.get("tolerations") or ()),
            deleting=bool(metadata.get("deletionTimestamp")),
            has_module_loader=loader is not None,
            version=container.get("version", "") or "",
            container_image=container.get("containerImage", "") or "",
            image_pull_policy=container.get("imagePullPolicy", "") or "",
            in_tree_modules_to_remove=_strings(container.get("inTreeModulesToRemove")),
            in_tree_module_to_remove=container.get("inTreeModuleToRemove", "") or "",
            registry_tls=container.get("registryTLS"),
            modprobe=Modprobe.from_object(container.get("modprobe") or {}),
            kernel_mappings=tuple(
                KernelMapping.from_object(m) for m in container.get("kernelMappings") or ()
            ),
            image_repo_secret=(spec.get("imageRepoSecret") or {}).get("name"),
            service_account=(loader or {}).get("serviceAccountName", "") or "",
        )


@dataclass(frozen=True)
class NodeView:
    """A Node as KMM reads it: labels, taints, kernel, boot id and Ready."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...] = ()
    kernel_version: str = ""
    boot_id: str = ""
    ready: bool = True

    @classmethod
    def from_object(cls, node: Mapping[str, Any]) -> NodeView:
        status = node.get("status") or {}
        info = status.get("nodeInfo") or {}
        conditions: Sequence[Mapping[str, Any]] = status.get("conditions") or ()
        return cls(
            name=node["metadata"]["name"],
            labels=dict(node["metadata"].get("labels") or {}),
            taints=tuple((node.get("spec") or {}).get("taints") or ()),
            kernel_version=info.get("kernelVersion", "") or "",
            boot_id=info.get("bootID", "") or "",
            ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        )

    def with_labels(self, changes: Mapping[str, str | None]) -> NodeView:
        """This node after a label patch (None removes)."""
        labels = dict(self.labels)
        for key, value in changes.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        return NodeView(
            self.name, labels, self.taints, self.kernel_version, self.boot_id, self.ready
        )
