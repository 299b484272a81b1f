"""What the decision asks the I/O layer to do: plain values, carried out by controller.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuctl.common.names import Phase
from gpuctl.rollout.event_notes import EventNote
from gpuctl.rollout.input.facts import GpuPod


@dataclass(frozen=True)
class PatchNode:
    """One merge patch of a Node, made only if it still has `resource_version`.

    A phase change, its annotations, the cordon and the KMM version label go together in one
    write, so a restart never sees half of a step recorded.
    """

    node: str
    resource_version: str
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None
    phase_from: Phase | None = None
    phase_to: Phase | None = None
    # Since when (RFC 3339) the node was in phase_from, where its own since annotation is
    # about another phase: a node Pending without a write (placement.waits_unwritten) has
    # waited since the rollout of its target began. "": the annotation says it.
    phase_since: str = ""
    event: EventNote | None = None
    # A start that takes the slot this node's Done write (of the same pass) frees: it is made
    # right after that write, and only if it succeeded. "" for every other write, a start
    # into a slot free before the pass included.
    freed_by: str = ""


@dataclass(frozen=True)
class RequestReport:
    node: str
    attempt: str


@dataclass(frozen=True)
class SendPrepare:
    node: str
    attempt: str
    module_name: str
    allow_unbind: bool
    allow_disable_vfs: bool
    # Modules KMM unloads after module_name (PrepareRequest.unloaded_with).
    unloaded_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class SendRestore:
    node: str
    attempt: str
    changes_json: str


@dataclass(frozen=True)
class EvictPods:
    node: str
    pods: tuple[GpuPod, ...]


@dataclass(frozen=True)
class RestoreRevision:
    """Put a recorded revision's kernelModule back into the GPUDriver's spec (a rollback),
    with the rollback record `note` (names.ROLLBACK) and the hold release cleared."""

    revision: Mapping[str, object]
    note: str
    event: EventNote


@dataclass(frozen=True)
class DeleteWorkerPods:
    """Delete KMM's worker Pods of the GPUDriver's Module on `node` that have not succeeded
    (a held node's, worker_hold.py)."""

    node: str


@dataclass(frozen=True)
class HoldWorkers:
    """Put `node` in the worker hold list (held) or take it out (worker_hold.py)."""

    node: str
    held: bool


@dataclass(frozen=True)
class NudgeKmm:
    """Touch KMM's NodeModulesConfig of `node` so that KMM reconciles it now."""

    node: str


@dataclass(frozen=True)
class ProbeImage:
    """Run KMM's copy of `kernel`'s modules out of `image` on `node`
    (gpuctl/rollout/input/image_probe.py), unless
    its probe Pod is there already."""

    node: str
    image: str
    kernel: str
    pull_secret: str = ""


@dataclass(frozen=True)
class DeleteImageProbe:
    """Delete the probe Pod `pod` of `node` (its answer was used, is stale, or is asked
    again)."""

    node: str
    pod: str


Action = (
    PatchNode
    | RequestReport
    | SendPrepare
    | SendRestore
    | EvictPods
    | DeleteWorkerPods
    | HoldWorkers
    | NudgeKmm
    | ProbeImage
    | DeleteImageProbe
)
