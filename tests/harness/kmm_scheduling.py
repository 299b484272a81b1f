"""KMM's Module reconciler as pure rules: which nodes a Module targets and what goes in their NMC.

Sources (KMM v2.6.0; unchanged at main unless noted): internal/controllers/module_reconciler.go
(Reconcile, prepareSchedulingData, prepareNodeSchedulingData, enableModuleOnNode,
finalizeModule, moduleUpdateWorkerPodsStatus), internal/node/node.go (IsNodeSchedulable,
GetNodesListBySelector; main: GetSchedulableNodesBySelector), internal/module/helper.go
(InternalTolerations), internal/module/kernelmapper.go (findKernelMapping,
prepareModuleLoaderData, replaceTemplates), internal/utils/replaceStrings.go.

Not modelled: the ModuleImagesConfig. M6 adds an NMC entry only once the image is ``Exists``;
the emulator has no registry and counts every image as existing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tests.harness.kmm_model import (
    DEFAULT_SERVICE_ACCOUNT,
    KernelMapping,
    ModuleConfig,
    ModuleView,
    NodeView,
    SpecEntry,
    StatusEntry,
    Tolerations,
)
from tests.harness.kmm_safety import Cause

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")

# M3 (internal/module/helper.go :: InternalTolerations): added to the Module's own.
INTERNAL_TOLERATIONS: Tolerations = tuple(
    {"key": f"node.kubernetes.io/{pressure}", "operator": "Exists", "effect": "NoSchedule"}
    for pressure in ("disk-pressure", "memory-pressure", "pid-pressure")
)


class KernelMappingError(ValueError):
    """A mapping KMM cannot evaluate (bad regexp, kernel with fewer than three parts): KMM
    leaves that node's NMC untouched (prepareSchedulingData drops it from both sets)."""


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """k8s.io/api core/v1 Toleration.ToleratesTaint, as KMM calls it (M2): an empty effect or
    key matches all; Exists ignores the value; Equal (or no operator) needs it equal."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or ""
    if operator == "Exists":
        return True
    if operator in ("", "Equal"):
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return False


def is_schedulable(taints: Sequence[Mapping[str, Any]], tolerations: Tolerations) -> bool:
    """M2 (node.go :: IsNodeSchedulable): no untolerated NoSchedule/NoExecute taint.
    PreferNoSchedule never counts; node conditions and spec.unschedulable are not looked at."""
    return all(
        any(tolerates(toleration, taint) for toleration in tolerations)
        for taint in taints
        if taint.get("effect") in SCHEDULING_EFFECTS
    )


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """M1 (client.MatchingLabels): every selector key present with an equal value."""
    return all(key in labels and labels[key] == value for key, value in selector.items())


def module_tolerations(module: ModuleView) -> Tolerations:
    """The Module's tolerations plus KMM's internal ones (M3)."""
    return (*module.tolerations, *INTERNAL_TOLERATIONS)


def is_targeted(module: ModuleView, node: NodeView) -> bool:
    """M1 (module_reconciler.go :: Reconcile; node.go :: GetNodesListBySelector)."""
    return selector_matches(module.selector, node.labels) and is_schedulable(
        node.taints, module_tolerations(module)
    )


def node_kernel(node: NodeView) -> str:
    """M4 (prepareSchedulingData): status.nodeInfo.kernelVersion, one trailing "+" removed."""
    return node.kernel_version.removesuffix("+")


def find_kernel_mapping(mappings: Sequence[KernelMapping], kernel: str) -> KernelMapping | None:
    """M4 (kernelmapper.go :: findKernelMapping): the first mapping in list order whose literal
    equals the kernel, else whose regexp matches it anywhere (Go MatchString: unanchored)."""
    for mapping in mappings:
        if mapping.literal and mapping.literal == kernel:
            return mapping
        if not mapping.regexp:
            continue
        try:
            if re.search(mapping.regexp, kernel):
                return mapping
        except re.error as error:
            raise KernelMappingError(f"regexp {mapping.regexp!r}: {error}") from error
    return None


_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _normalized_kernel(kernel: str) -> str:
    """internal/kernel/kernel.go :: NormalizeVersion."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", kernel)


def substitute_image(image: str, kernel: str, namespace: str, name: str) -> str:
    """kernelmapper.go :: replaceTemplates (utils KernelComponentsAsEnvVars, envsubst):
    ${KERNEL_FULL_VERSION} ${KERNEL_VERSION} ${KERNEL_XYZ} ${KERNEL_X|Y|Z} ${MOD_NAME}
    ${MOD_NAMESPACE}; unknown names become "". A kernel of fewer than three [.,-] parts is
    an error whether or not the image uses a template."""
    normalized = _normalized_kernel(kernel)
    parts = re.split(r"[.,-]", normalized)
    if len(parts) < 3:
        raise KernelMappingError(f"kernel {kernel!r} has fewer than three components")
    variables = {
        "KERNEL_FULL_VERSION": normalized,
        "KERNEL_VERSION": normalized,
        "KERNEL_XYZ": ".".join(parts[:3]),
        "KERNEL_X": parts[0],
        "KERNEL_Y": parts[1],
        "KERNEL_Z": parts[2],
        "MOD_NAME": name,
        "MOD_NAMESPACE": namespace,
    }
    return _TEMPLATE.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), image)


def spec_entry(module: ModuleView, mapping: KernelMapping, kernel: str) -> SpecEntry:
    """M6 (module_reconciler.go :: enableModuleOnNode; kernelmapper.go ::
    prepareModuleLoaderData): the NMC spec entry for this node.

    Image and registryTLS: the mapping's, else the container's. In-tree list: the mapping's if
    set, else the container's; a deprecated single ``inTreeModuleToRemove`` (the mapping's
    before the container's) replaces it. Modprobe, version, pull policy, pull secret and service
    account (default "default") come from the Module; tolerations are its own + internal.
    """
    in_tree = module.in_tree_modules_to_remove
    if mapping.in_tree_modules_to_remove is not None:
        in_tree = mapping.in_tree_modules_to_remove
    single = mapping.in_tree_module_to_remove or module.in_tree_module_to_remove
    if single:
        in_tree = (single,)
    tls = mapping.registry_tls if mapping.registry_tls is not None else module.registry_tls
    image = mapping.container_image or module.container_image
    config = ModuleConfig(
        kernel_version=kernel,
        container_image=substitute_image(image, kernel, module.namespace, module.name),
        image_pull_policy=module.image_pull_policy,
        insecure_pull=bool(tls and (tls.get("insecure") or tls.get("insecureSkipTLSVerify"))),
        in_tree_modules_to_remove=in_tree,
        modprobe=module.modprobe,
    )
    return SpecEntry(
        config=config,
        version=module.version,
        tolerations=module_tolerations(module),
        image_repo_secret=module.image_repo_secret,
        service_account=module.service_account or DEFAULT_SERVICE_ACCOUNT,
    )


def worker_version_label(namespace: str, name: str) -> str:
    """KMM's worker gate (kmmlabels.go :: GetWorkerPodVersionLabelName; V1, M5)."""
    return f"beta.kmm.node.kubernetes.io/version-worker-pod.{namespace}.{name}"


class Action(Enum):
    ADD = "add"
    DELETE = "delete"
    NONE = "none"


@dataclass(frozen=True)
class Scheduling:
    """What the Module reconciler does to one node's NMC; ``cause``: why a DELETE."""

    action: Action
    entry: SpecEntry | None = None
    cause: Cause | None = None


NOTHING = Scheduling(Action.NONE)


def schedule_targeted_node(module: ModuleView, node: NodeView, configured: bool) -> Scheduling:
    """M5 (module_reconciler.go :: prepareNodeSchedulingData), for a targeted node.

    No mapping: delete if the NMC carries the module. Mapping and no Module version: add.
    Worker version label equal to the version: add; present but different: leave the NMC as
    it is (the previous version keeps running); absent: delete. Raises KernelMappingError.
    """
    kernel = node_kernel(node)
    mapping = find_kernel_mapping(module.kernel_mappings, kernel)
    if mapping is None:
        if configured:
            return Scheduling(Action.DELETE, cause=Cause.NO_KERNEL_MAPPING)
        return NOTHING
    entry = spec_entry(module, mapping, kernel)
    label = node.labels.get(worker_version_label(module.namespace, module.name))
    if not module.version:
        return Scheduling(Action.ADD, entry)
    if label is not None and label == module.version:
        return Scheduling(Action.ADD, entry)
    if label is not None:
        return NOTHING
    return Scheduling(Action.DELETE, cause=Cause.VERSION_CHANGE)


def untargeted_cause(module: ModuleView, node: NodeView | None) -> Cause:
    """Why a configured node is no longer a target: selector first, else a taint (M1/M2)."""
    if node is None or not selector_matches(module.selector, node.labels):
        return Cause.UNTARGETED
    return Cause.TAINT


def schedule(
    module: ModuleView, nodes: Sequence[NodeView], configured: Collection[str]
) -> dict[str, Scheduling]:
    """M1 + M5 (prepareSchedulingData): a decision per targeted node (nodes whose mapping
    cannot be evaluated are left out, their NMC untouched), then DELETE for every configured
    node that is not a target. ``configured``: nodes whose NMC carries the module."""
    result: dict[str, Scheduling] = {}
    by_name = {node.name: node for node in nodes}
    remaining = set(configured)
    for node in nodes:
        if not is_targeted(module, node):
            continue
        remaining.discard(node.name)
        try:
            result[node.name] = schedule_targeted_node(module, node, node.name in configured)
        except KernelMappingError:
            continue
    for name in sorted(remaining):
        cause = untargeted_cause(module, by_name.get(name))
        result[name] = Scheduling(Action.DELETE, cause=cause)
    return result


def configs_equal(spec: SpecEntry | None, status: StatusEntry | None) -> bool:
    """N2/N7/M8: both present and reflect.DeepEqual(spec.Config, status.Config)."""
    return spec is not None and status is not None and spec.config == status.config


def loader_status(
    targeted: int, entries: Sequence[tuple[SpecEntry, StatusEntry | None]]
) -> dict[str, int]:
    """M8 (module_reconciler.go :: moduleUpdateWorkerPodsStatus): status.moduleLoader.

    ``entries``: (spec, status) of every NMC configured for the module. Zero counts are left
    out, as KMM's DaemonSetStatus fields are ``omitempty``.
    """
    counts = {
        "nodesMatchingSelectorNumber": targeted,
        "desiredNumber": len(entries),
        "availableNumber": sum(1 for spec, status in entries if configs_equal(spec, status)),
    }
    return {key: value for key, value in counts.items() if value}
