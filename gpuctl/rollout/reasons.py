"""Why a rollout waits, as a kind programs read and words people read.

The coordinator's decision names one Hold per rollout (what keeps every node from starting:
the failure budget, a pause, the Prometheus gate, ...) and writes its kind beside its words in
status.rollout (`holdKind`, `message`); the rollout's state follows from the kind alone
(state_of). A Blocked node carries a Block (its reason's kind and words), and every node that
could start and did not a Wait (why, for that node). Status, Events, metrics and the CLI
compare kinds, never words: words change with the facts they quote, kinds only with a
release.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RolloutState(enum.StrEnum):
    """status.rollout.state."""

    PROGRESSING = "Progressing"
    HELD = "Held"
    PAUSED = "Paused"
    COMPLETE = "Complete"
    FAILED = "Failed"
    # A target version and no node targeted, none opted out: loaded nowhere is not Complete.
    NO_NODES = "NoNodes"


class HoldKind(enum.StrEnum):
    """What keeps new nodes of a rollout from starting (nodes in a step finish it)."""

    # Too many nodes Failed at the target (rollout.failureBudget).
    FAILURE_BUDGET = "FailureBudget"
    # rollout.paused.
    PAUSED = "Paused"
    # rollout.holdAfterFirstNode, until `gpuctl rollout resume` releases the target.
    AFTER_FIRST_NODE = "AfterFirstNode"
    # Every maintenance window is closed.
    OUTSIDE_WINDOWS = "OutsideWindows"
    # The Prometheus gate's query returned series, or could not be evaluated.
    PROMETHEUS_GATE = "PrometheusGate"
    # kured holds its reboot lock (it drains and reboots a node), or the lock cannot be read.
    KURED_REBOOTING = "KuredRebooting"
    # The Module does not ask KMM for the target yet (or is missing, or being deleted).
    MODULE_NOT_READY = "ModuleNotReady"
    # Nodes verified at the target are watched before the next one starts.
    SOAKING = "Soaking"
    # A rollback's nodes are taken back; then the rollback pauses the rollout.
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"
    # A rollback is due, but a GitOps tool owns spec.kernelModule: paused until the revision
    # is put back in Git (or `gpuctl rollout resume` goes on with the target).
    ROLLBACK_IN_GIT = "RollbackInGit"
    # The rollout cannot be read (spec.rollout invalid) or conflicts with another GPUDriver:
    # nothing starts, nodes mid-step finish it.
    REFUSED = "Refused"


# Holds of a rollback: the rollout stays Paused under them even once every node is back, until
# `gpuctl rollout resume`.
ROLLBACK_HOLDS = frozenset({HoldKind.ROLLING_BACK, HoldKind.ROLLED_BACK, HoldKind.ROLLBACK_IN_GIT})

# The state of a rollout that is not Complete, by what holds it (Progressing for the rest).
_STATES = {
    HoldKind.FAILURE_BUDGET: RolloutState.FAILED,
    HoldKind.PAUSED: RolloutState.PAUSED,
    HoldKind.AFTER_FIRST_NODE: RolloutState.HELD,
    HoldKind.PROMETHEUS_GATE: RolloutState.HELD,
    # Even with every node back: the failure stays until `gpuctl rollout resume`.
    HoldKind.ROLLED_BACK: RolloutState.PAUSED,
    HoldKind.ROLLBACK_IN_GIT: RolloutState.PAUSED,
    HoldKind.REFUSED: RolloutState.PAUSED,
}


@dataclass(frozen=True)
class Hold:
    """One reason no new node starts: `kind` for programs, `words` for people."""

    kind: HoldKind
    words: str


def state_of(hold: Hold | None) -> RolloutState:
    """The state of a rollout that is not Complete, held by `hold` (None: nothing holds)."""
    if hold is None:
        return RolloutState.PROGRESSING
    return _STATES.get(hold.kind, RolloutState.PROGRESSING)


def parse_hold_kind(text: object) -> HoldKind | None:
    """status.rollout.holdKind as written; None for none, or one this build does not know."""
    try:
        return HoldKind(str(text))
    except ValueError:
        return None


def parse_state(text: object) -> RolloutState | None:
    """status.rollout.state as written; None for a value this build does not know."""
    try:
        return RolloutState(str(text))
    except ValueError:
        return None


class BlockKind(enum.StrEnum):
    """Why one node is Blocked. The node carries it (names.REASON_KIND) beside its reason in
    words; the metrics count Blocked nodes by it (the values are Prometheus label values)."""

    NODE_NOT_READY = "node-not-ready"
    # No fresh agent report within the check's timeout.
    AGENT_UNREACHABLE = "agent-unreachable"
    # The node's pods could not be listed.
    PODS_UNKNOWN = "pods-unknown"
    GPU_PODS = "gpu-pods"
    # Pods the GPUDriver declares pausable (rollout.pause) stayed on the node past the drain
    # timeout though their own spec selects on gpuctl.dev/driver-ready (the DaemonSet
    # controller did not delete them), or they are not a DaemonSet's: released, tried again.
    PAUSED_PODS = "paused-pods"
    # A declared DaemonSet's pod stayed on the node past the drain timeout with the label off:
    # the DaemonSet does not select on gpuctl.dev/driver-ready. Blocked until the DaemonSet
    # changes (a pod of another revision on the node), not tried again before
    # (gpuctl/rollout/step/pause.py).
    PAUSE_NOT_SELECTING = "pause-not-selecting"
    GPU_CLAIMS = "gpu-claims"
    # Whether GPU ResourceClaims are allocated on the node cannot be told.
    CLAIMS_UNKNOWN = "claims-unknown"
    # Another GPUDriver targets the node.
    FOREIGN_TARGET = "foreign-target"
    # The agent's blockers (gpuctl.api NodeReport Blocker.Reason).
    OPEN_CLIENTS = "open-clients"
    VFS = "vfs"
    MODULE_HOLDERS = "module-holders"
    MODULE_IN_USE = "module-in-use"
    BUILTIN = "builtin"
    TRANSITIONING = "transitioning"
    # The agent cannot tell what holds the devices, or its report cannot be read.
    UNKNOWN_STATE = "unknown-state"
    # Devices opened after the check, before KMM acted: KMM's worker is held off the node.
    OPENED_AFTER_CHECK = "opened-after-check"
    # KMM has not found the target's image for the node's kernel, or the image is not proven
    # yet to hold the kernel's modules (its probe pulling, running, unread:
    # gpuctl/rollout/step/kernel_proof.py): a reload would unload the old module and might strand
    # the node, so nothing is unloaded.
    IMAGE_NOT_READY = "image-not-ready"
    # KMM's copy of the node's kernel's modules out of the reload's image, run on the node
    # (gpuctl/rollout/input/image_probe.py), failed: the image has no /opt/lib/modules/<kernel>, and
    # KMM's loader would fail for ever after the flip unloaded the old module, so nothing is
    # unloaded.
    IMAGE_LACKS_KERNEL = "image-lacks-kernel"
    # The node enforces module signatures (Secure Boot, lockdown, sig_enforce) and the target
    # is not signed: its load would be refused after the unload (gpuctl/rollout/step/preflight.py).
    UNSIGNED_TARGET = "unsigned-target"
    # The node enforces module signatures and the target is signed with a key it does not
    # trust, or one whose trust cannot be told (gpuctl/rollout/input/signing_key.py): refused after
    # the unload too.
    SIGNING_KEY = "signing-key"
    # Whether the node enforces module signatures is unknown (an older agent, efivarfs or
    # securityfs not mounted) and the target is unsigned or its key not proven trusted: taken
    # as enforcing, never as safe (gpuctl/rollout/step/preflight.py).
    SIGNATURES_UNKNOWN = "signatures-unknown"
    # The node's kernel refuses every load of the module (nomodeset, module_blacklist=, an
    # `install` override: the agent's DISABLED): the target would never load
    # (gpuctl/rollout/step/preflight.py).
    DRIVER_DISABLED = "driver-disabled"
    # The node rebooted and the module it came back with (the in-tree one, autoloaded) is in
    # use: KMM's loader would remove it, so KMM's worker is held off the node (reboots.py).
    REBOOTED_IN_USE = "rebooted-in-use"
    # The node's GPU has no driver (its agent says so in this boot: a Node registered again, or
    # a new one, that KMM loads nothing on) and a rollout-wide hold keeps it from starting:
    # it would start at once otherwise, whatever maxUnavailable (gpuctl/rollout/input/
    # driverless.py). Cleared by itself when the hold lifts.
    DRIVERLESS_HELD = "driverless-held"
    # A Blocked node without a kind this build knows (an older coordinator wrote it).
    UNRECORDED = "unrecorded"


@dataclass(frozen=True)
class Block:
    """What keeps one node Blocked: `kind` for programs, `words` for people."""

    kind: BlockKind
    words: str


def parse_block_kind(text: object) -> BlockKind:
    """names.REASON_KIND as written; UNRECORDED for none, or one this build does not know."""
    try:
        return BlockKind(str(text))
    except ValueError:
        return BlockKind.UNRECORDED


class WaitKind(enum.StrEnum):
    """Why a node the rollout could start (Pending, or Blocked) does not start in a pass."""

    # Its own blocker (Wait.block says which).
    BLOCKED = "Blocked"
    # A rollout-wide hold (Wait.hold says which).
    HELD = "Held"
    NODE_NOT_READY = "NodeNotReady"
    # As many nodes as maxUnavailable allows are unavailable already.
    MAX_UNAVAILABLE = "MaxUnavailable"
    # The Prometheus gate's answer is older than a start may rest on: it is asked afresh.
    GATE_NOT_ASKED = "GateNotAsked"


@dataclass(frozen=True)
class Wait:
    """Why one node does not start now: `kind` for programs, `words` for people; the hold
    or block behind it where there is one."""

    kind: WaitKind
    words: str
    hold: Hold | None = None
    block: Block | None = None
