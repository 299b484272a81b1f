"""The node's own GPU daemons paused for its step, and drained pods beyond the GPU pods (pure).

A real GPU node is never idle: XPU Manager, an exporter, a device plugin hold its render
nodes, and a DaemonSet's pod ignores cordons and evictions (it comes straight back). So the
daemons select on names.DRIVER_READY_LABEL, and the rollout takes the label off in the write
that cordons the node for its step (`pause_write`): the DaemonSet controller deletes their
pods. The node drains until the GPU pods, the pods holding the GPU that are drained with them
(gpu_clients.ClientFate.EVICTED, recorded), the pods of rollout.drain.podSelector and every
pod the GPUDriver declares pausable are gone (`drained_pods`, `pausable_on_node`); the fresh check
before the KMM write then sees nothing holding the GPU, or blocks naming what does. Once the
new driver is verified the label goes back, and the node waits (at most rollout.pause.timeout;
past it, Done with a warning) until a pod of every controller recorded is back and Ready
(`not_back`), then is uncordoned.

The record (names.PAUSED_CLIENTS, JSON) says whether the node had the label before, which
controllers' pods were paused, and which pods are drained: a step that ends without any
change (Blocked before the unload) gives the label back as it was (`released_labels`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from gpuctl.common import names
from gpuctl.rollout.facts import GpuPod, NodeFacts, RolloutInput
from gpuctl.rollout.gpu_clients import ClientFate, JudgedClient, is_pausable, pods_of
from gpuctl.rollout.pod_facts import PodFacts
from gpuctl.rollout.records import RecordError

# Seconds between looks at a node whose paused pods have not left, or not come back, yet.
PAUSE_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class PausedRecord:
    ready_before: bool = False
    # The controllers ("DaemonSet ns/name") whose pods must be back after the load.
    owners: tuple[str, ...] = ()
    # The pods ("ns/name") holding the GPU that are drained like GPU pods.
    evict: tuple[str, ...] = ()


def encode_paused(record: PausedRecord) -> str:
    body = {
        "readyBefore": record.ready_before,
        "owners": list(record.owners),
        "evict": list(record.evict),
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{names.PAUSED_CLIENTS}: {what} is not a list of strings")
    return tuple(value)


def decode_paused(text: str | None) -> PausedRecord | None:
    """The record (None when there is none); RecordError when it cannot be read."""
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        raise RecordError(f"{names.PAUSED_CLIENTS} is not JSON: {text[:80]!r}") from None
    if not isinstance(body, dict) or not isinstance(body.get("readyBefore"), bool):
        raise RecordError(f"{names.PAUSED_CLIENTS} has no readyBefore: {text[:80]!r}")
    return PausedRecord(
        ready_before=body["readyBefore"],
        owners=_strings(body.get("owners", []), "owners"),
        evict=_strings(body.get("evict", []), "evict"),
    )


def recorded(node: NodeFacts) -> PausedRecord:
    """The node's record; an unreadable one reads as none (nothing paused, nothing to wait
    for back: the fresh check before the KMM write still sees every client)."""
    try:
        return decode_paused(node.annotations.get(names.PAUSED_CLIENTS)) or PausedRecord()
    except RecordError:
        return PausedRecord()


def driver_ready(node: NodeFacts) -> bool:
    return node.labels.get(names.DRIVER_READY_LABEL) == names.DRIVER_READY_VALUE


def pausable_on_node(inp: RolloutInput, node: NodeFacts) -> tuple[PodFacts, ...]:
    """The node's pods the GPUDriver declares pausable (being deleted or not): a draining node
    waits until none is left."""
    return tuple(p for p in node.pods if is_pausable(inp.settings.pause, p))


def pause_write(
    inp: RolloutInput, node: NodeFacts, judged: Sequence[JudgedClient]
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The labels and annotations of the write that starts the node's step: the driver-ready
    label off (the pause), and the record, made once per pass."""
    labels: dict[str, str | None] = {}
    if names.DRIVER_READY_LABEL in node.labels:
        labels[names.DRIVER_READY_LABEL] = None
    if names.PAUSED_CLIENTS in node.annotations:
        return labels, {}
    owners = sorted({p.owner for p in pausable_on_node(inp, node) if p.owner})
    evict = [str(p) for p in pods_of(judged, ClientFate.EVICTED)]
    record = PausedRecord(driver_ready(node), tuple(owners), tuple(evict))
    return labels, {names.PAUSED_CLIENTS: encode_paused(record)}


def drained_pods(inp: RolloutInput, node: NodeFacts) -> tuple[GpuPod, ...]:
    """What the drain evicts (or waits for): the GPU pods, the recorded pods holding the GPU,
    and the pods of rollout.drain.podSelector; never a pausable pod (its pause takes it off)."""
    evict = set(recorded(node).evict)
    selector = inp.settings.drain_pod_selector
    found = {str(p): GpuPod(p.namespace, p.name) for p in node.gpu_pods or ()}
    for pod in node.pods:
        if is_pausable(inp.settings.pause, pod):
            continue
        if str(pod) in evict or pod.has_labels(selector):
            found[str(pod)] = GpuPod(pod.namespace, pod.name)
    return tuple(found[k] for k in sorted(found))


def not_back(node: NodeFacts) -> tuple[str, ...]:
    """The recorded controllers without a Ready pod on the node (not being deleted)."""
    back = {p.owner for p in node.pods if p.ready and not p.deleting}
    return tuple(owner for owner in recorded(node).owners if owner not in back)


def released_labels(node: NodeFacts) -> dict[str, str | None]:
    """A step that ends with nothing changed gives the driver-ready label back as it was."""
    record = recorded(node)
    if record.ready_before and not driver_ready(node):
        return {names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}
    return {}
