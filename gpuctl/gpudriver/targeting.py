"""Which nodes a GPUDriver wants its driver on: its node selector and a kernel mapping (pure).

Shared: the coordinator's rollout decides with it and `gpuctl rollout plan` shows the same
answers. KMM must never see the user's selector: a node leaving it would be unloaded at once
(rules M1/M5, internal/controllers/module_reconciler.go). gpuctl evaluates it here, and the
rollout moves each wanted node in, and each unwanted one out, through the node checks. A node
is wanted when it matches the GPUDriver's selector (nodeSelector + arch [+ NFD's gpu-pci
label]), carries no NoSchedule/NoExecute taint the GPUDriver's tolerations leave untolerated
(gpuctl.gpudriver.tolerations.wanted_tolerations; the Module itself tolerates every taint),
and one of its kernel mappings matches the node's kernel the way KMM matches it
(internal/module/kernelmapper.go: `status.nodeInfo.kernelVersion` with one trailing "+"
dropped; `literal` equal first, then an unanchored `regexp` search, in list order).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpuctl.common.nodes import node_labels, node_name
from gpuctl.gpudriver import re2
from gpuctl.gpudriver.node_selectors import matches_labels
from gpuctl.gpudriver.tolerations import node_taints, untolerated, wanted_tolerations

ARCH_LABEL = "kubernetes.io/arch"
ARCH_VALUE = "amd64"
NFD_GPU_PCI_LABEL = "intel.feature.node.kubernetes.io/gpu-pci"


def node_selector(spec: Mapping[str, Any]) -> dict[str, str]:
    """The labels a node needs for a GPUDriver spec: nodeSelector + arch [+ NFD's gpu-pci]."""
    selector = dict(spec.get("nodeSelector") or {})
    if spec.get("useNFDLabeling"):
        selector[NFD_GPU_PCI_LABEL] = "true"
    selector[ARCH_LABEL] = ARCH_VALUE
    return selector


def node_kernel(node: Mapping[str, Any]) -> str:
    """The kernel KMM matches mappings against: nodeInfo.kernelVersion less one trailing '+'."""
    kernel = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion") or "")
    return kernel.removesuffix("+")


def mapping_for(kernel: str, mappings: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first kernel mapping that serves `kernel`, or None (KMM then loads nothing there)."""
    if not kernel:
        return None
    for mapping in mappings:
        if mapping.get("literal") and mapping["literal"] == kernel:
            return mapping
        regexp = mapping.get("regexp")
        if regexp:
            try:
                if re2.search(str(regexp), kernel):
                    return mapping
            except re.error:
                continue
    return None


def wants_node(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """True when the GPUDriver spec wants its driver loaded on `node`."""
    kernel_module = spec.get("kernelModule") or {}
    if not kernel_module:
        return False
    if not matches_labels(node_selector(spec), node_labels(node)):
        return False
    if untolerated(node_taints(node), wanted_tolerations(spec)):
        return False
    return mapping_for(node_kernel(node), kernel_module.get("kernelMappings") or []) is not None


def wants(spec: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """wants_node(spec, ·) for many nodes: the selector and tolerations built once, and each
    distinct kernel's mapping found once (a fleet has thousands of nodes and a few kernels)."""
    kernel_module = spec.get("kernelModule") or {}
    selector = node_selector(spec)
    mappings = kernel_module.get("kernelMappings") or []
    tolerations = wanted_tolerations(spec)
    served: dict[str, bool] = {}

    def wanted(node: Mapping[str, Any]) -> bool:
        if not kernel_module or not matches_labels(selector, node_labels(node)):
            return False
        if untolerated(node_taints(node), tolerations):
            return False
        kernel = node_kernel(node)
        if kernel not in served:
            served[kernel] = mapping_for(kernel, mappings) is not None
        return served[kernel]

    return wanted


def wanted_nodes(spec: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The names of the nodes the GPUDriver spec wants its driver on."""
    if not spec.get("kernelModule"):
        return frozenset()
    wanted = wants(spec)
    return frozenset(node_name(node) for node in nodes if wanted(node))
