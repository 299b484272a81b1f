"""The cluster autoscaler keeps its hands off a node while it is in a step (pure).

A node mid-step is cordoned and, to the cluster autoscaler, often empty of Pods: the very node
it scales down first, deleting it halfway through a load or a verification. So every write
that moves a node into a step (names.IN_PROGRESS) also sets the autoscaler's own
`cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`, and every write that moves it
out takes it off, together with gpuctl's record that it set it
(names.SCALE_DOWN_DISABLED_BY_GPUCTL): an admin's own annotation is never changed, and a node
the rollout leaves loses it with the rest of its state (names.STATE_ANNOTATIONS). A node the
autoscaler (or anyone) deletes mid-step anyway leaves nothing behind: the worker hold list,
the maxUnavailable count and the failure budget are all read off the Nodes that exist.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuctl.common import names
from gpuctl.common.names import Phase


def scale_down_annotations(
    annotations: Mapping[str, str], to: Phase | None
) -> dict[str, str | None]:
    """The annotation changes that keep the autoscaler off a node moving to phase `to` (None:
    leaving the rollout) whose annotations are `annotations`."""
    ours = annotations.get(names.SCALE_DOWN_DISABLED_BY_GPUCTL) == "true"
    if to is not None and to in names.IN_PROGRESS:
        if ours or names.SCALE_DOWN_DISABLED in annotations:
            return {}  # set by us for this step already, or the admin's own
        return {names.SCALE_DOWN_DISABLED: "true", names.SCALE_DOWN_DISABLED_BY_GPUCTL: "true"}
    if ours:
        return {names.SCALE_DOWN_DISABLED: None, names.SCALE_DOWN_DISABLED_BY_GPUCTL: None}
    return {}
