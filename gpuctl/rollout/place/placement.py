"""Where a node not in a step of its version belongs in the rollout (pure; decide.py's step 1
and 2).

Each node's version is the target (the Module's KMM version) when the GPUDriver wants it,
else names.REMOVAL_VERSION. A wanted node is `Skipped` (opted out; its reason says when that
leaves its GPU without a driver, `opted_out_words`), `Loading` (targeted at
the target by someone else, KMM not done: verified like any other) or `Pending` (anything
else: a node targeted and loaded at the target before the rollout reached it is verified when
its turn comes, gpuctl/rollout/start/starts.py; a node labelled at the target without
names.TARGET_LABEL included: the Module does not select it, so it takes the normal path). A node
this GPUDriver verified Done at another version is Pending without a write (`waits_unwritten`):
its labels move when its turn comes. A node no longer wanted that KMM
loads for this GPUDriver is `Pending` on the removal path (or stays `Skipped` when opted out:
the driver stays); one where nothing was loaded for it leaves the rollout (or fails, for the
admin, when preparation may have changed its devices). A node in a step about another version
goes back to Checking at its version, unless it is being verified again after a reboot at
the version KMM loads there, or Blocked by what that boot brought up (`rebooted_in_place`).
"""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.step.writes import (
    failed,
    kmm_loaded,
    leave,
    removing,
    transition,
    version_words,
    written,
)

OPTED_OUT = f"opted out with {names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}"
# An opted-out node its agent reports without a driver (gpuctl/rollout/input/driverless.py: a
# Node registered again, whose KMM labels went with the old object, rebooted blacklisted): the
# rollout leaves it alone, as asked, and says what that leaves it with.
DRIVERLESS_OPTED_OUT = (
    f"{OPTED_OUT}; its GPU has no driver (KMM loads none here): take {names.OPT_OUT_LABEL} "
    "off to have the rollout load one"
)


def opted_out_words(node: NodeFacts) -> str:
    """A Skipped node's reason: opted out, and whether that leaves its GPU without a driver."""
    return DRIVERLESS_OPTED_OUT if node.driverless else OPTED_OUT


def placement(inp: RolloutInput, node: NodeFacts) -> PatchNode | None:
    """The write that puts `node` in its place, or None when it is there (or in its step)."""
    version = inp.target_for(node)
    if removing(version):
        return _removal_placement(inp, node)
    if rebooted_in_place(node):
        return None
    if node.phase in IN_PROGRESS:
        return _moved(inp, node, version)
    if _stays(node, version):
        return _skip_restated(inp, node, version) or _unwritten_done(inp, node, version)
    if waits_unwritten(inp, node):
        return None
    return _placed(inp, node, version)


def rebooted_in_place(node: NodeFacts) -> bool:
    """A node verified again after a reboot at the version KMM loads there (reboots.py), or
    Blocked by what that boot brought up in use: it keeps its place, whatever the target,
    until the verification is over or the checks take it on (gpuctl/rollout/start/starts.py, under
    the gates)."""
    if node.phase is Phase.VERIFYING:
        return names.REBOOTED in node.annotations
    return node.phase is Phase.BLOCKED and node.reason_kind is BlockKind.REBOOTED_IN_USE


def waits_unwritten(inp: RolloutInput, node: NodeFacts) -> bool:
    """A node this GPUDriver verified Done at another version than the one it is to load now
    waits for its turn as it is: Pending in the decision, its labels untouched until it
    starts (straight to Checking). Every label gpuctl writes on a node costs KMM a
    NodeModulesConfig reconcile of the node and a reconcile of the whole Module (docs/kmm.md):
    writing Pending on every node when a version is asked is a fleet-wide burst of them ahead
    of the first node's load, and says nothing the state-version annotation and the status
    do not."""
    version = inp.target_for(node)
    return (
        not removing(version)
        and node.phase is Phase.DONE
        and node.state_version != version
        and node.annotations.get(names.GPUDRIVER) == inp.driver_name
        and not node.opted_out
        and not written(inp, node, version)
    )


def _stays(node: NodeFacts, version: str) -> bool:
    """True when the node (not in a step) already has its place at `version`."""
    phase, current = node.phase, node.state_version == version
    if current and phase in (Phase.DONE, Phase.FAILED):
        return True
    if node.opted_out:
        return phase is Phase.SKIPPED
    return current and phase in (Phase.BLOCKED, Phase.PENDING)


def _skip_restated(inp: RolloutInput, node: NodeFacts, version: str) -> PatchNode | None:
    """A Skipped node whose reason no longer says what opting out leaves it with."""
    words = opted_out_words(node)
    if not node.opted_out or node.phase is not Phase.SKIPPED or node.reason == words:
        return None
    return transition(inp, node, Phase.SKIPPED, words, version=node.state_version or version)


def _moved(inp: RolloutInput, node: NodeFacts, version: str) -> PatchNode | None:
    """A node in a step about another version: back to Checking at its version."""
    if node.phase not in IN_PROGRESS or node.state_version == version:
        return None
    before = version_words(node.state_version) if node.state_version else "another version"
    reason = (
        f"{version_words(version)} is asked now, not {before}: checking the node again "
        "(cordon and records kept)"
    )
    return transition(inp, node, Phase.CHECKING, reason, version=version)


def _unwritten_done(inp: RolloutInput, node: NodeFacts, target: str) -> PatchNode | None:
    """A Done node whose KMM write someone undid (KMM no longer targets it): loaded again
    through the checks."""
    if node.phase is not Phase.DONE or written(inp, node, target):
        return None
    why = f"{names.TARGET_LABEL} or the version label was removed: loading it again"
    return transition(inp, node, Phase.PENDING, why, version=target)


def _placed(inp: RolloutInput, node: NodeFacts, target: str) -> PatchNode:
    """The place of a wanted node not yet in this rollout."""
    if node.opted_out:
        return transition(inp, node, Phase.SKIPPED, opted_out_words(node), version=target)
    if written(inp, node, target):
        if kmm_loaded(inp, node, target):
            # KMM's ready labels survive reboots and say nothing of what is live now: Done
            # only once the agent has verified it in this boot, when its turn comes
            # (gpuctl/rollout/start/starts.py starts it in Verifying, within maxUnavailable).
            reason = (
                f"already targeted and loaded at {target} before the rollout reached it: "
                "verified when its turn comes"
            )
            return transition(inp, node, Phase.PENDING, reason, version=target)
        # Targeted by someone else: KMM acts on it whatever gpuctl does; verify its result.
        reason = f"targeted at {target} before the rollout reached it; waiting for KMM"
        return transition(inp, node, Phase.LOADING, reason, version=target)
    # Without names.TARGET_LABEL the Module does not select the node: the normal path.
    return transition(inp, node, Phase.PENDING, "", version=target)


# -- the removal path ---------------------------------------------------------------------


def unload_needed(inp: RolloutInput, node: NodeFacts) -> bool:
    """KMM loads (or has loaded) the driver on the node for this GPUDriver."""
    return node.target_label == inp.driver_name or inp.kmm.ready in node.labels


def _unwanted_words(inp: RolloutInput) -> str:
    if inp.target_version is None:
        return f"GPUDriver {inp.driver_name} loads its driver nowhere now"
    return f"GPUDriver {inp.driver_name} no longer wants the node"


def _removal_placement(inp: RolloutInput, node: NodeFacts) -> PatchNode | None:
    none = names.REMOVAL_VERSION
    if node.phase in IN_PROGRESS:
        return _removal_moved(inp, node)
    if not unload_needed(inp, node):
        return _leave_without_unload(inp, node)
    if node.opted_out:
        reason = f"{OPTED_OUT}: the driver stays"
        keep = node.phase is Phase.SKIPPED
        return None if keep else transition(inp, node, Phase.SKIPPED, reason, version=none)
    if node.state_version == none and node.phase in (Phase.PENDING, Phase.BLOCKED, Phase.FAILED):
        return None
    reason = f"{_unwanted_words(inp)}: its driver is unloaded through the checks"
    return transition(inp, node, Phase.PENDING, reason, version=none)


def _removal_moved(inp: RolloutInput, node: NodeFacts) -> PatchNode | None:
    """A node in a step not on the removal path: onto it when KMM may be acting for this
    GPUDriver there (it is seen through), else it leaves."""
    if node.state_version == names.REMOVAL_VERSION:
        return None
    if unload_needed(inp, node) or node.phase in (Phase.LOADING, Phase.VERIFYING):
        return _moved(inp, node, names.REMOVAL_VERSION)
    return _leave_without_unload(inp, node)


def _leave_without_unload(inp: RolloutInput, node: NodeFacts) -> PatchNode | None:
    """A node no longer wanted on which KMM loads nothing for this GPUDriver: it leaves the
    rollout, unless preparation may have changed its devices (then it fails, for the admin)
    or it failed already."""
    if node.phase is None or node.phase is Phase.FAILED:
        return None
    preparing = node.phase is Phase.PREPARING and inp.settings.prepare_changes_node
    if node.annotations.get(names.PREPARE_CHANGES) or preparing:
        reason = (
            f"{_unwanted_words(inp)} while preparation may have changed its devices: "
            f"restore what {names.PREPARE_CHANGES} lists, then clear {names.STATE_LABEL}"
        )
        return failed(inp, node, reason, node.state_version or names.REMOVAL_VERSION)
    reason = f"{_unwanted_words(inp)}; nothing was loaded for it there"
    return leave(inp, node, reason, "RolloutReleased")
