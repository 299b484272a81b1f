"""The node label, annotations and phases the rollout keeps its state in (a public contract).

`gpuctl rollout status|retry` and admins read and write these, so the words are fixed:
the label `gpuctl.dev/driver-state` holds the phase, annotations hold the detail.
"""

from __future__ import annotations

from enum import StrEnum

STATE_LABEL = "gpuctl.dev/driver-state"
# A node carrying this label with value "skip" is never labelled by the rollout.
OPT_OUT_LABEL = "gpuctl.dev/rollout"
OPT_OUT_VALUE = "skip"

SINCE = "gpuctl.dev/driver-state-since"
REASON = "gpuctl.dev/driver-state-reason"
STATE_VERSION = "gpuctl.dev/driver-state-version"
GPUDRIVER = "gpuctl.dev/driver-state-gpudriver"
CORDONED_BY_GPUCTL = "gpuctl.dev/cordoned-by-gpuctl"
PREPARE_CHANGES = "gpuctl.dev/prepare-changes"
BOUND_BEFORE = "gpuctl.dev/bound-before"
# Beyond the contract's list: what a restore and a srcversion check need if the coordinator
# is killed between the agent's answer and the write that records it.
VFS_BEFORE = "gpuctl.dev/vfs-before"
SRCVERSION_BEFORE = "gpuctl.dev/srcversion-before"

# On the GPUDriver: `gpuctl rollout resume` sets it to the target version to release the hold.
RESUMED_VERSION = "gpuctl.dev/rollout-resumed-version"

# Annotations that describe one node's pass and are dropped once it is done.
PASS_DETAIL = (PREPARE_CHANGES, BOUND_BEFORE, VFS_BEFORE, SRCVERSION_BEFORE)


class Phase(StrEnum):
    PENDING = "Pending"
    CHECKING = "Checking"
    DRAINING = "Draining"
    PREPARING = "Preparing"
    LOADING = "Loading"
    VERIFYING = "Verifying"
    DONE = "Done"
    BLOCKED = "Blocked"
    FAILED = "Failed"
    SKIPPED = "Skipped"


# Phases in which a node is being worked on (and counts as unavailable).
IN_PROGRESS = frozenset(
    {Phase.CHECKING, Phase.DRAINING, Phase.PREPARING, Phase.LOADING, Phase.VERIFYING}
)
# status.rollout.nodes order: the worst first.
SEVERITY = (
    Phase.FAILED,
    Phase.BLOCKED,
    Phase.VERIFYING,
    Phase.LOADING,
    Phase.PREPARING,
    Phase.DRAINING,
    Phase.CHECKING,
    Phase.PENDING,
    Phase.SKIPPED,
    Phase.DONE,
)


def parse_phase(value: str | None) -> Phase | None:
    """The phase a label value names; None for no label or a value that is not a phase."""
    if value is None:
        return None
    try:
        return Phase(value)
    except ValueError:
        return None
