"""The reference's known issues as GPUDriver warnings, naming the nodes (pure).

The Intel GPU operator's documentation (intel/gpu-base-operator, OOTDRIVER.md) lists known
issues a user otherwise meets as a silent failure; gpuctl says them in `status.warnings`, the
`KnownIssues` condition and a Warning Event:

- `FirmwarePathOnContainerd`: "containerd: KMM's worker image is using USER 201 to set
  firmware load path. Even if the container is running with securityContext: privileged:
  true, the worker Pod fails to set the path. This will block KMD install." So
  `kernelModule.firmwarePath` set while targeted nodes run containerd
  (`status.nodeInfo.containerRuntimeVersion` = `containerd://...`) names those nodes.
- `UnsupportedOS`: "Currently the OoT KMD only supports Ubuntu 26.04." Targeted nodes whose
  `status.nodeInfo.osImage` is not Ubuntu 26.04 are named with their OS; a node that reports
  no OS is named too (unknown is not supported).
- `NoNodesTargeted`: the selector matches no node, or no kernel mapping serves the kernel of
  any node it matches: the driver is loaded nowhere, which is not "Ready" nor a rollout
  "Complete".
- `UnknownFields` (gpuctl's own): the stored spec has fields this coordinator does not know,
  from a newer CRD (the chart's CRDs applied before the coordinator is upgraded): they are
  ignored, named, until the coordinator catches up (unknown_fields.py).

"Targeted" is gpuctl.gpudriver.targeting's "wanted": the selector matches and a kernel mapping
serves the node's kernel (the nodes the rollout takes the driver to).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.common.nodes import node_labels, node_name
from gpuctl.gpudriver.model import GPUDriverSpec
from gpuctl.gpudriver.node_selectors import matches_labels
from gpuctl.gpudriver.status import NO_NODES_TARGETED, named
from gpuctl.gpudriver.targeting import node_kernel, node_selector, wanted_nodes
from gpuctl.gpudriver.unknown_fields import unknown_fields

CONTAINERD = "containerd://"
SUPPORTED_OS = "Ubuntu 26.04"
FIRMWARE_ON_CONTAINERD = "FirmwarePathOnContainerd"
UNSUPPORTED_OS = "UnsupportedOS"
NO_NODES = NO_NODES_TARGETED
UNKNOWN_FIELDS = "UnknownFields"


@dataclass(frozen=True)
class KnownIssue:
    """A warning about a GPUDriver; `message` goes to status.warnings verbatim."""

    reason: str
    message: str
    nodes: tuple[str, ...] = ()


def _node_info(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return (node.get("status") or {}).get("nodeInfo") or {}


def _os_image(node: Mapping[str, Any]) -> str:
    return str(_node_info(node).get("osImage") or "")


def supported_os(os_image: str) -> bool:
    """Ubuntu 26.04 (`Ubuntu 26.04 LTS`, `Ubuntu 26.04.1 LTS`), nothing else."""
    return os_image == SUPPORTED_OS or os_image.startswith((f"{SUPPORTED_OS} ", f"{SUPPORTED_OS}."))


def _firmware_on_containerd(
    spec: Mapping[str, Any], targeted: Sequence[Mapping[str, Any]]
) -> KnownIssue | None:
    firmware = (spec.get("kernelModule") or {}).get("firmwarePath")
    if not firmware:
        return None
    nodes = [
        node_name(n)
        for n in targeted
        if str(_node_info(n).get("containerRuntimeVersion") or "").startswith(CONTAINERD)
    ]
    if not nodes:
        return None
    return KnownIssue(
        FIRMWARE_ON_CONTAINERD,
        f"kernelModule.firmwarePath is set ({firmware}) and nodes {named(nodes)} run "
        "containerd, where KMM's worker cannot set the firmware path (its image runs as USER "
        "201; even privileged, the worker Pod fails to set it): the driver will not install "
        "there. Ship the firmware another way and leave firmwarePath empty, or run those "
        "nodes on another container runtime",
        tuple(nodes),
    )


def _unsupported_os(targeted: Sequence[Mapping[str, Any]]) -> KnownIssue | None:
    odd = [n for n in targeted if not supported_os(_os_image(n))]
    if not odd:
        return None
    described = [f"{node_name(n)} ({_os_image(n) or 'OS not reported'})" for n in odd]
    return KnownIssue(
        UNSUPPORTED_OS,
        f"nodes {named(described)} do not run {SUPPORTED_OS}, the only OS the out-of-tree "
        "xe driver supports",
        tuple(node_name(n) for n in odd),
    )


def _no_nodes(
    spec: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], targeted: Sequence[Any]
) -> KnownIssue | None:
    if targeted:
        return None
    selector = node_selector(spec)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
    matching = [n for n in nodes if matches_labels(selector, node_labels(n))]
    if not matching:
        return KnownIssue(
            NO_NODES, f"the node selector ({shown}) matches no node: the driver is loaded nowhere"
        )
    kernels = [f"{node_name(n)} ({node_kernel(n) or 'kernel not reported'})" for n in matching]
    return KnownIssue(
        NO_NODES,
        f"no kernel mapping serves the kernel of any node the selector ({shown}) matches: "
        f"{named(kernels)}; the driver is loaded nowhere",
        tuple(node_name(n) for n in matching),
    )


def known_issues(
    spec: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    wanted: frozenset[str] | None = None,
) -> tuple[KnownIssue, ...]:
    """The known issues of a GPUDriver spec with a kernelModule on these Nodes, or ();
    `wanted`: targeting.wanted_nodes(spec, nodes) when the caller has it already."""
    if not spec.get("kernelModule"):
        return ()
    every = sorted(nodes, key=node_name)
    # wanted_nodes, not wants_node per node: the selector built and each kernel matched once
    # (the reconciler asks this of every Node about twice a second during a rollout, through
    # a wanted_memo.WantedMemo).
    if wanted is None:
        wanted = wanted_nodes(spec, every)
    targeted = [n for n in every if node_name(n) in wanted]
    found = (
        _unknown(spec),
        _no_nodes(spec, every, targeted),
        _firmware_on_containerd(spec, targeted),
        _unsupported_os(targeted),
    )
    return tuple(issue for issue in found if issue is not None)


def _unknown(spec: Mapping[str, Any]) -> KnownIssue | None:
    fields = unknown_fields(GPUDriverSpec, spec, "spec")
    if not fields:
        return None
    return KnownIssue(
        UNKNOWN_FIELDS,
        f"{', '.join(fields)}: not known to this gpuctl-coordinator, ignored (the GPUDriver CRD "
        "is newer than the coordinator: upgrade the coordinator to the chart's version)",
    )


def new_warnings(
    issues: Sequence[KnownIssue], previous_status: Mapping[str, Any]
) -> tuple[KnownIssue, ...]:
    """The issues whose message status.warnings does not hold yet: each gets an Event once."""
    before = set(previous_status.get("warnings") or [])
    return tuple(issue for issue in issues if issue.message not in before)
