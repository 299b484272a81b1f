"""What every step of one node uses: its result, the clock, the Node writes, KMM's labels.

Pure. The writes (`transition`, `blocked`, `failed`, `leave`) each carry a whole step in
one PatchNode, so a restart finds either the old step or the new one. The KMM write
(`kmm_write`) is the one act that makes KMM load or unload a node: on the load path it sets
names.TARGET_LABEL=<driver> with KMM's version label, so the Module (which selects nodes by
TARGET_LABEL) targets the node at the target version; on the removal path
(names.REMOVAL_VERSION) it removes both, and KMM unloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpuctl.common import names, timestamps
from gpuctl.common.names import Phase
from gpuctl.common.unload_rule import ACTIVE_VFS, reason_name, unload_verdict
from gpuctl.rollout.actions import PatchNode, RequestReport
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.event_notes import NORMAL, WARNING, EventNote, EventType
from gpuctl.rollout.input.facts import CallState, NodeFacts, ReportFacts, RolloutInput
from gpuctl.rollout.input.records import BootRecord, encode_boot
from gpuctl.rollout.reasons import Block, BlockKind
from gpuctl.rollout.step.autoscaler import scale_down_annotations
from gpuctl.rollout.step.gpu_clients import (
    ClientFate,
    JudgedClient,
    clients_words,
    judge_clients,
    report_clients,
    vm_holders_words,
)
from gpuctl.rollout.step.pause import drained_pods, pausable_on_node, released_labels
from gpuctl.rollout.step.preflight import disabled_block, signature_block

# Seconds between retries of a failed agent request, and between verification polls.
CALL_RETRY_SECONDS = 1.0
VERIFY_POLL_SECONDS = 1.0
EVICT_RETRY_SECONDS = 2.0
# The oldest an agent answer may be when the KMM write is decided on it (else ask again).
FRESH_REPORT_SECONDS = 5.0
MODULE_LIVE = "LIVE"
MODULE_NOT_LOADED = "NOT_LOADED"
# KMM's ModuleImagesConfig state of an image it found (kmmv1beta1.ImageExists).
IMAGE_EXISTS = "Exists"


def step_elapsed(since: str, now: datetime, observed_for: float) -> float:
    """How long a step has run, as far as this coordinator saw it: from its `since` to now,
    but no more than the coordinator has been watching without a gap."""
    return min(seconds_since(since, now), observed_for)


def seconds_since(since: str, now: datetime) -> float:
    """Seconds from an RFC 3339 timestamp to now; 0 when it is missing or unreadable."""
    start = timestamps.parse_or_none(since)
    if start is None:
        return 0.0
    return max(0.0, (now - start).total_seconds())


def epoch(moment: datetime) -> float:
    return moment.timestamp()


def duration_words(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def removing(version: str) -> bool:
    """True for the removal path's version: the driver is taken off the node."""
    return version == names.REMOVAL_VERSION


def version_words(version: str) -> str:
    return "removal" if removing(version) else version


def due(call: CallState | None, now: float, every: float) -> bool:
    """True when a request should be (re)sent: never sent, or the last one ended `every` ago."""
    if call is None:
        return True
    if call.in_flight:
        return False
    return call.finished_at is not None and now - call.finished_at >= every


def ask_report(result: StepResult, node: NodeFacts) -> None:
    result.actions.append(RequestReport(node.name, node.attempt))


NOT_READY = Block(BlockKind.NODE_NOT_READY, "node is NotReady")

# The kind of a Blocked node by its first agent blocker (the Blocker.Reason name); any other
# (CLIENTS_UNKNOWN, STATE_UNKNOWN, a reason this build does not know) is an unknown state.
_REPORT_KINDS = {
    "OPEN_CLIENTS": BlockKind.OPEN_CLIENTS,
    "ACTIVE_VFS": BlockKind.VFS,
    "MODULE_HOLDERS": BlockKind.MODULE_HOLDERS,
    "MODULE_IN_USE": BlockKind.MODULE_IN_USE,
    "BUILTIN": BlockKind.BUILTIN,
    "TRANSITIONING": BlockKind.TRANSITIONING,
}


def report_block(reasons: Sequence[str], messages: Sequence[str]) -> Block | None:
    """The agent's blockers (Blocker.Reason names and their words) as one Block, its kind the
    first one's; None for none."""
    if not reasons:
        return None
    kind = _REPORT_KINDS.get(reasons[0], BlockKind.UNKNOWN_STATE)
    return Block(kind, "; ".join(messages))


OPEN_CLIENTS = "OPEN_CLIENTS"


def unfixable_block(
    inp: RolloutInput, report: ReportFacts, node: NodeFacts, *, clearable: bool = False
) -> Block | None:
    """The blockers neither draining nor the allowed preparation can clear (None: none).

    The shared unload rule (gpuctl.common.unload_rule) decides: VFs preparation may disable
    block nothing; a holder module always blocks (KMM removes the module first). Open clients
    are named by their pods (gpuctl/rollout/step/gpu_clients.py); with `clearable` (the checks
    before the drain), those the pause or the drain takes off the node (_cleared) do not block.
    Before the KMM write every client blocks.
    """
    blocking = unload_verdict(report.report, inp.unload_settings).blocking
    clients = judged_clients(inp, report, node)
    reasons, messages = [], []
    named = False
    for blocker in blocking:
        if blocker.reason == OPEN_CLIENTS and clients:
            if named:  # one blocker names every client, whichever function it holds
                continue
            named = True
            if clearable:
                clients = tuple(c for c in clients if c.fate not in _cleared(inp))
            if clients:
                reasons.append(blocker.reason)
                messages.append(clients_words(clients))
            continue
        reasons.append(blocker.reason)
        if blocker.reason == ACTIVE_VFS:
            vms = vm_holders_words(report.report, blocker.pci_address, node.pods)
            messages.append(blocker.message + vms)
            continue
        messages.append(blocker.message)
    return report_block(reasons, messages)


def preflight_block(inp: RolloutInput, report: ReportFacts, node: NodeFacts) -> Block | None:
    """Will the target load on this node at all (gpuctl/rollout/step/preflight.py)? None when it
    will, or on the removal path (nothing is loaded there). Asked by the checks before the drain and
    by a
    Blocked node's rechecks: a node that fails it is Blocked before anything is unloaded."""
    version = inp.target_for(node)
    if removing(version):
        return None
    disabled = disabled_block(report.report, inp.module_driver)
    if disabled is not None:
        return disabled
    return signature_block(
        report.report,
        inp.kernel_module,
        inp.signing_certificates,
        trusted=inp.settings.trust_image_signatures,
        version=version,
    )


def _cleared(inp: RolloutInput) -> frozenset[ClientFate]:
    """The clients the pause and the drain take off the node: paused pods, and the pods drained
    with the GPU pods where evictGPUPods evicts them (else nothing ends them but themselves)."""
    if inp.settings.evict_gpu_pods:
        return frozenset({ClientFate.PAUSED, ClientFate.EVICTED})
    return frozenset({ClientFate.PAUSED})


def judged_clients(
    inp: RolloutInput, report: ReportFacts, node: NodeFacts
) -> tuple[JudgedClient, ...]:
    """The clients the agent's OPEN_CLIENTS blockers are about (those of functions bound to
    the module), each judged (gpuctl/rollout/step/gpu_clients.py)."""
    held = {b.pci_address for b in report.report.blockers if reason_name(b.reason) == OPEN_CLIENTS}
    clients = report_clients(report.report, held)
    return judge_clients(clients, node.pods, inp.settings.pause)


def drain_block(inp: RolloutInput, node: NodeFacts, *, paused: bool = True) -> Block | None:
    """What a drain waits for, as a Block (None: nothing); without the paused pods unless
    `paused` (a node not draining has not paused them: they do not hold it up)."""
    words = drain_words(inp, node, paused=paused)
    if not words:
        return None
    if drained_pods(inp, node):
        kind = BlockKind.GPU_PODS
    elif node.claims:
        kind = BlockKind.GPU_CLAIMS
    else:
        kind = BlockKind.PAUSED_PODS
    return Block(kind, words)


def drain_words(inp: RolloutInput, node: NodeFacts, *, paused: bool = True) -> str:
    """What a drain waits for on the node: its GPU pods (and the pods drained with them),
    allocated claims and (with `paused`) paused pods not gone yet ("" for none)."""
    parts = []
    drained = drained_pods(inp, node)
    if drained:
        parts.append("GPU pods " + ", ".join(str(p) for p in drained))
    if node.claims:
        parts.append("allocated GPU ResourceClaims " + ", ".join(node.claims))
    left = pausable_on_node(inp, node) if paused else ()
    if left:
        pods = ", ".join(f"{p} ({p.owner})" if p.owner else str(p) for p in left)
        parts.append(f"paused pods to leave ({names.DRIVER_READY_LABEL} is off): {pods}")
    return "; ".join(parts)


def claims_unknown(node: NodeFacts) -> Block | None:
    """Why the node may not go on because its claims are unknown (None when they are known)."""
    if not node.claims_unknown:
        return None
    return Block(
        BlockKind.CLAIMS_UNKNOWN,
        f"cannot tell whether GPU ResourceClaims are allocated on the node: {node.claims_unknown}",
    )


def foreign_target(inp: RolloutInput, node: NodeFacts) -> Block | None:
    """Why a wanted node may not be loaded: another GPUDriver targets it (None when none)."""
    other = node.target_label
    if not other or other == inp.driver_name:
        return None
    words = f"node is targeted by GPUDriver {other} ({names.TARGET_LABEL}={other})"
    return Block(BlockKind.FOREIGN_TARGET, words)


# -- KMM's labels -------------------------------------------------------------------------


def written(inp: RolloutInput, node: NodeFacts, version: str) -> bool:
    """The KMM write for `version` is on the node: targeted at that version, or (removal)
    neither targeted by this GPUDriver nor labelled with a version."""
    if removing(version):
        return node.target_label != inp.driver_name and inp.kmm.version not in node.labels
    return node.target_label == inp.driver_name and node.labels.get(inp.kmm.version) == version


def image_not_ready(inp: RolloutInput, node: NodeFacts) -> Block | None:
    """A reload whose image KMM has not found for the node's kernel (None when there is none).

    KMM's ordered upgrade unloads the old module as soon as the version label flips, and writes
    no config for the new one until its ModuleImagesConfig says the image exists: with the
    image missing the node would be left without a driver. So the version label of a node KMM
    has loaded at another version flips only once KMM says `Exists` (a first load needs no
    such check: without the image KMM starts no loader at all, and the live module stays).
    """
    version = inp.target_for(node)
    loaded = node.labels.get(inp.kmm.version, "")
    if removing(version) or not loaded or loaded == version:
        return None
    if node.target_label != inp.driver_name or node.image_state == IMAGE_EXISTS:
        return None
    image = node.target_image or "(no kernel mapping serves its kernel)"
    if inp.images_unknown:
        # Unread is not "not found": the words say which, and what to look at.
        return Block(
            BlockKind.IMAGE_NOT_READY,
            f"whether KMM has found image {image} for the node's kernel is unknown (its "
            f"ModuleImagesConfig could not be read: {inp.images_unknown}): the reload would "
            f"unload {loaded} and might leave the node without a driver; it waits until the "
            "record is read",
        )
    says = f"says {node.image_state}" if node.image_state else "says nothing of it yet"
    return Block(
        BlockKind.IMAGE_NOT_READY,
        f"KMM has not found image {image} for the node's kernel (its ModuleImagesConfig "
        f"{says}): the reload would unload {loaded} and leave the node without a driver; "
        "push the image or fix the kernel mapping",
    )


def not_loaded_in_this_boot(node: NodeFacts) -> str:
    """Why KMM's own record does not show its loader ran in the node's current boot ("" when
    it does, or when the Node reports no boot id to compare). KMM's ready labels survive a
    reboot; its NodeModulesConfig's status.modules[].bootId is the boot its loader last
    succeeded in (KMM v2.6.0 nmc_reconciler.go), so a module live in this boot that KMM did
    not load (a host copy of the same build, a loader killed after insmod) leaves KMM wanting
    to reload a node that counts as verified."""
    if not node.boot_id:
        return ""
    if node.kmm_boot_id is None:
        return "KMM's NodeModulesConfig of the node is not read yet"
    if not node.kmm_boot_id:
        return "KMM's NodeModulesConfig records no load of the module on the node"
    if node.kmm_boot_id != node.boot_id:
        return (
            f"KMM's NodeModulesConfig records its load in boot {node.kmm_boot_id[:8]}, not in "
            f"this boot ({node.boot_id[:8]}): its loader has not run since the node booted"
        )
    return ""


def kmm_loaded(inp: RolloutInput, node: NodeFacts, version: str) -> bool:
    """KMM reports the module loaded at `version` (its ready and version.ready labels)."""
    return inp.kmm.ready in node.labels and node.labels.get(inp.kmm.version_ready) == version


def kmm_settled(inp: RolloutInput, node: NodeFacts) -> bool:
    """KMM is not in the middle of anything the rollout asked on this node: the module is
    loaded at the version the node is labelled with, or not loaded and not asked for."""
    labels = node.labels
    if inp.kmm.ready in labels:
        return labels.get(inp.kmm.version_ready) == labels.get(inp.kmm.version)
    return inp.kmm.version not in labels and node.target_label != inp.driver_name


def kmm_write_labels(inp: RolloutInput, node: NodeFacts, version: str) -> dict[str, str | None]:
    """The labels of the KMM write for `version`: target the node at it, or (removal) drop
    this GPUDriver's target and the version label."""
    if not removing(version):
        return {names.TARGET_LABEL: inp.driver_name, inp.kmm.version: version}
    labels: dict[str, str | None] = {inp.kmm.version: None}
    if node.target_label == inp.driver_name:
        labels[names.TARGET_LABEL] = None
    return labels


# -- the writes ---------------------------------------------------------------------------


def transition(
    inp: RolloutInput,
    node: NodeFacts,
    to: Phase,
    reason: str,
    *,
    version: str,
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    unschedulable: bool | None = None,
    event_kind: EventType = NORMAL,
) -> PatchNode:
    """The write that moves `node` to phase `to` (about `version`), with what goes with it."""
    all_annotations: dict[str, str | None] = {
        names.SINCE: timestamps.format_seconds(inp.now),
        names.REASON: reason,
        names.STATE_VERSION: version,
        names.GPUDRIVER: inp.driver_name,
    }
    if names.REASON_KIND in node.annotations:
        # Only a Blocked node has a kind (blocked() writes it): any other step drops it.
        all_annotations[names.REASON_KIND] = None
    if names.PAUSE_NOT_SELECTING in node.annotations and to is not Phase.BLOCKED:
        # kept only while Blocked (gpuctl/rollout/step/pause.py)
        all_annotations[names.PAUSE_NOT_SELECTING] = None
    if names.SOAK_BASELINE in node.annotations:
        # A soak's baseline belongs to the Done it was recorded with
        # (gpuctl/rollout/step/verifying.py writes the next one with its Done): a node moved on
        # never soaks on a stale one.
        all_annotations[names.SOAK_BASELINE] = None
    if to is Phase.DONE and node.boot_id:
        # The boot it is verified in: a node KMM loads in another one rebooted (reboots.py).
        boot = BootRecord(node.boot_id, node.kernel_version)
        all_annotations[names.VERIFIED_BOOT] = encode_boot(boot)
    if to is Phase.DONE and names.REBOOT_TAKEN_UP in node.annotations:
        all_annotations[names.REBOOT_TAKEN_UP] = None
    if names.REBOOTED in node.annotations and to not in (Phase.VERIFYING, Phase.FAILED):
        # A verification after a reboot ends with its step (reboots.py).
        all_annotations[names.REBOOTED] = None
    all_annotations.update(scale_down_annotations(node.annotations, to))
    all_annotations.update(annotations or {})
    all_labels: dict[str, str | None] = {names.STATE_LABEL: to.value}
    if to is Phase.DONE:
        # Verified: GPU daemons and workloads may use the driver (gpuctl/rollout/step/pause.py).
        all_labels[names.DRIVER_READY_LABEL] = names.DRIVER_READY_VALUE
    elif to is Phase.FAILED and names.DRIVER_READY_LABEL in node.labels:
        all_labels[names.DRIVER_READY_LABEL] = None  # what is loaded is not known good
    all_labels.update(labels or {})
    event = None
    if to is not Phase.PENDING:
        words = f"{to.value}: {reason}" if reason else to.value
        event = EventNote(event_kind, f"Rollout{to.value}", f"{version}: {words}")
    return PatchNode(
        node=node.name,
        resource_version=node.resource_version,
        labels=all_labels,
        annotations=all_annotations,
        unschedulable=unschedulable,
        phase_from=node.phase,
        phase_to=to,
        event=event,
    )


def cordon(node: NodeFacts, annotations: dict[str, str | None]) -> bool | None:
    """The cordon of a write that takes the node out of service: the write's `unschedulable`,
    with names.CORDONED_BY_GPUCTL added to `annotations` ("false": an admin's cordon, kept
    when the rollout lets the node go)."""
    if node.cordoned_by_us:
        return True if not node.unschedulable else None
    if node.unschedulable:
        annotations[names.CORDONED_BY_GPUCTL] = "false"
        return None
    annotations[names.CORDONED_BY_GPUCTL] = "true"
    return True


def blocked(inp: RolloutInput, node: NodeFacts, block: Block, version: str) -> PatchNode:
    """Blocked: released (uncordoned, records dropped) unless the node was already changed:
    preparation changed its devices, or KMM is still acting on a write of this pass."""
    recorded_changes = bool(node.annotations.get(names.PREPARE_CHANGES))
    untouched = not recorded_changes and kmm_settled(inp, node)
    annotations: dict[str, str | None] = {names.REASON_KIND: block.kind.value}
    labels: dict[str, str | None] = {}
    unschedulable = None
    if untouched:
        annotations.update(dict.fromkeys(names.PASS_DETAIL))
        # the paused daemons come back (gpuctl/rollout/step/pause.py)
        labels.update(released_labels(node))
        if node.cordoned_by_us:
            annotations[names.CORDONED_BY_GPUCTL] = None
            unschedulable = False
    return transition(
        inp,
        node,
        Phase.BLOCKED,
        block.words,
        version=version,
        labels=labels,
        annotations=annotations,
        unschedulable=unschedulable,
        event_kind=WARNING,
    )


def failed(
    inp: RolloutInput,
    node: NodeFacts,
    reason: str,
    version: str,
    annotations: dict[str, str | None] | None = None,
    *,
    labels: dict[str, str | None] | None = None,
) -> PatchNode:
    """Failed: the node keeps its cordon and records, for the admin to look at and retry."""
    return transition(
        inp,
        node,
        Phase.FAILED,
        reason,
        version=version,
        labels=labels,
        annotations=annotations,
        event_kind=WARNING,
    )


def leave(inp: RolloutInput, node: NodeFacts, reason: str, event_reason: str) -> PatchNode:
    """The node leaves the rollout: its state label and annotations go, and our cordon (an
    admin's stays). The end of the removal path (`RolloutRemoved`), and the exit of a node
    the GPUDriver no longer wants where nothing was loaded (`RolloutReleased`)."""
    labels: dict[str, str | None] = {names.STATE_LABEL: None}
    if names.DRIVER_READY_LABEL in node.labels:
        labels[names.DRIVER_READY_LABEL] = None
    return PatchNode(
        node=node.name,
        resource_version=node.resource_version,
        labels=labels,
        annotations={
            **dict.fromkeys(names.STATE_ANNOTATIONS),
            **scale_down_annotations(node.annotations, None),
        },
        unschedulable=False if node.cordoned_by_us else None,
        phase_from=node.phase,
        phase_to=None,
        event=EventNote(NORMAL, event_reason, f"{names.REMOVAL_VERSION}: {reason}"),
    )
