"""What `gpuctl driver abandon NAME` changes on the Nodes: only what GPUDriver NAME's rollout
left there, never another GPUDriver's, never an admin's cordon.

The way out when the coordinator is gone for good used to be a paragraph of `kubectl label
nodes --all ...`: that strips every GPUDriver's target label (KMM then unloads all their nodes,
busy or not) and uncordoned nodes an admin had cordoned. Here each node's changes are decided
from its own labels and annotations:

- `gpuctl.dev/driver-target` goes only where it names NAME;
- KMM's version label goes only for NAME's Module(s);
- the rollout state (its label and `names.STATE_ANNOTATIONS`, and the image it recorded) goes
  only where `gpuctl.dev/driver-state-gpudriver` names NAME (or, with no such annotation, where
  the node is NAME's target: an older coordinator wrote no owner);
- the cordon is lifted only where the rollout recorded it as its own
  (`gpuctl.dev/cordoned-by-gpuctl`) for NAME;
- what the rollout's prepare step changed on the host (`gpuctl.dev/prepare-changes`) cannot be
  undone from the API: it is reported for the admin to restore.

Pure: plain dicts in, plain values out; no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names, timestamps

RELEASED_ANNOTATIONS = (*names.STATE_ANNOTATIONS, names.DRIVER_IMAGE)


@dataclass(frozen=True)
class NodeRelease:
    """The changes one node needs: labels and annotations to remove, whether to uncordon, what
    the prepare step left on the host (empty: nothing), and whether KMM has the driver there
    (the node carries the driver's target or version label)."""

    node: str
    labels: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    uncordon: bool = False
    prepare_changes: str = ""
    unloads: bool = False

    def patch(self) -> dict[str, Any]:
        """The node's merge patch."""
        body: dict[str, Any] = {
            "metadata": {
                "labels": dict.fromkeys(self.labels),
                "annotations": dict.fromkeys(self.annotations),
            }
        }
        if self.uncordon:
            body["spec"] = {"unschedulable": False}
        return body


def _meta(node: Mapping[str, Any], part: str) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get(part) or {}


def node_release(
    driver: str, version_labels: Sequence[str], node: Mapping[str, Any]
) -> NodeRelease | None:
    """The node's changes for abandoning `driver` (whose Modules' KMM version labels are
    `version_labels`), or None when nothing on it is the driver's."""
    labels, annotations = _meta(node, "labels"), _meta(node, "annotations")
    targeted = labels.get(names.TARGET_LABEL) == driver
    owner = annotations.get(names.GPUDRIVER)
    state_is_ours = owner == driver or (owner is None and targeted)
    remove_labels = [names.TARGET_LABEL] if targeted else []
    remove_labels += [label for label in version_labels if label in labels]
    remove_annotations: list[str] = []
    if state_is_ours:
        if names.STATE_LABEL in labels:
            remove_labels.append(names.STATE_LABEL)
        remove_annotations = [key for key in RELEASED_ANNOTATIONS if key in annotations]
        if annotations.get(names.SCALE_DOWN_DISABLED_BY_GPUCTL) == "true":
            remove_annotations.append(names.SCALE_DOWN_DISABLED)  # the autoscaler's, ours
    uncordon = (
        state_is_ours
        and names.CORDONED_BY_GPUCTL in annotations
        and bool((node.get("spec") or {}).get("unschedulable"))
    )
    if not remove_labels and not remove_annotations and not uncordon:
        return None
    return NodeRelease(
        node=str((node.get("metadata") or {}).get("name", "")),
        labels=tuple(remove_labels),
        annotations=tuple(remove_annotations),
        uncordon=uncordon,
        prepare_changes=annotations.get(names.PREPARE_CHANGES, "") if state_is_ours else "",
        unloads=targeted or any(label in labels for label in version_labels),
    )


def node_releases(
    driver: str, version_labels: Sequence[str], nodes: Sequence[Mapping[str, Any]]
) -> list[NodeRelease]:
    """Every node with something of `driver` on it, by name."""
    found = (node_release(driver, version_labels, node) for node in nodes)
    return sorted((r for r in found if r is not None), key=lambda r: r.node)


def live_holder(lease: Mapping[str, Any], now: datetime.datetime) -> str | None:
    """The Lease's holder if it renewed within its duration (a coordinator is leading), else
    None. A Lease without a renew time or duration is not live."""
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    seconds = spec.get("leaseDurationSeconds")
    if not holder or not renewed or not seconds:
        return None
    renewed_at = timestamps.parse_or_none(renewed)
    if renewed_at is None:
        return None
    return str(holder) if now - renewed_at < datetime.timedelta(seconds=int(seconds)) else None
