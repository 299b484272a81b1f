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

A declared DaemonSet that does not select on the label keeps its pod on the node: the drain
would wait, block, be released and start again for ever. A pod of a declared DaemonSet still
on the node, not being deleted, when the drain times out with the label off, and whose own
spec does not show the label in its nodeSelector (a DaemonSet's pods show no node affinity
term: pod_facts.selects_driver_ready), is such a DaemonSet's (`not_selecting`). The node is
Blocked once (BlockKind.PAUSE_NOT_SELECTING, `not_selecting_block`: the DaemonSet and the
lines to add to its pod template) and records the DaemonSets' revisions (names.
PAUSE_NOT_SELECTING); it stays Blocked while a pod of a revision recorded is on it
(`still_not_selecting`), and goes on once the DaemonSet changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from gpuctl.common import names
from gpuctl.rollout.input.facts import GpuPod, NodeFacts, RolloutInput
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rollout.input.records import RecordError
from gpuctl.rollout.reasons import Block, BlockKind
from gpuctl.rollout.step.gpu_clients import ClientFate, JudgedClient, is_pausable, pods_of

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


# A DaemonSet's pods carry the hash of the template revision they were made from.
REVISION_LABEL = "controller-revision-hash"

# What to add to the pod template (spec.template.spec) of a DaemonSet that does not select on
# the label: a nodeSelector, or a required node affinity term (docs/gpu-daemons.md).
_LABEL, _VALUE = names.DRIVER_READY_LABEL, names.DRIVER_READY_VALUE
SELECTOR_SNIPPET = f'nodeSelector: {{{_LABEL}: "{_VALUE}"}}'
AFFINITY_SNIPPET = f'{{key: {_LABEL}, operator: In, values: ["{_VALUE}"]}}'


def revision_of(pod: PodFacts) -> str:
    """The DaemonSet and the revision of its template the pod was made from:
    "namespace/name@hash" (the pod's UID for a pod without the hash)."""
    labels = dict(pod.labels)
    return f"{pod.namespace}/{pod.owner_name}@{labels.get(REVISION_LABEL) or pod.uid}"


def not_selecting(inp: RolloutInput, node: NodeFacts) -> tuple[PodFacts, ...]:
    """The declared DaemonSets' pods left on the node with the label off, not being deleted,
    whose spec does not show that they select on it: asked when the drain has waited its
    timeout, long past the DaemonSet controller's deletion of a pod that does."""
    if driver_ready(node):
        return ()
    return tuple(
        p
        for p in pausable_on_node(inp, node)
        if p.daemon and not p.deleting and not p.selects_driver_ready
    )


def still_not_selecting(inp: RolloutInput, node: NodeFacts) -> tuple[PodFacts, ...]:
    """The declared pods on the node of a DaemonSet revision recorded as not selecting."""
    try:
        recorded = json.loads(node.annotations.get(names.PAUSE_NOT_SELECTING) or "[]")
    except ValueError:
        return ()  # unreadable: the node is tried again (and the drain records it anew)
    if not isinstance(recorded, list):
        return ()
    return tuple(
        p
        for p in pausable_on_node(inp, node)
        if p.daemon and not p.deleting and revision_of(p) in recorded
    )


def not_selecting_record(pods: Sequence[PodFacts]) -> dict[str, str | None]:
    """The annotation that keeps the node Blocked while these pods' revisions are on it."""
    revisions = sorted({revision_of(p) for p in pods})
    return {names.PAUSE_NOT_SELECTING: json.dumps(revisions, separators=(",", ":"))}


def not_selecting_block(pods: Sequence[PodFacts]) -> Block:
    """The node's Block while `pods` stay: each with its DaemonSet, and what to add to it."""
    named = ", ".join(f"{p} ({p.owner})" for p in pods)
    words = (
        f"with {_LABEL} off, declared paused pods stayed on the node: {named}; their DaemonSet "
        f"does not select on {_LABEL}, so the pause cannot take them off. Add to its pod "
        f"template (spec.template.spec) {SELECTOR_SNIPPET}, or a required node affinity term "
        f"{AFFINITY_SNIPPET} (docs/gpu-daemons.md). Nothing was unloaded; the node is tried "
        "again once the DaemonSet changes"
    )
    return Block(BlockKind.PAUSE_NOT_SELECTING, words)
