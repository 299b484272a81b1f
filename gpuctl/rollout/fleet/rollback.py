"""onNodeFailure: Rollback: back to the previous revision once a node's load or verification
failed at the target (pure).

A node Failed at the target after its KMM write (not after a reboot: the boot changed, not the
version) rolls the GPUDriver back to the revision before the target (status.revisions,
gpuctl/gpudriver/revisions.py); once the rollback is recorded, or left to Git, nothing more is
asked. The nodes go back through the same checks; the rollback then holds the rollout
(pass_holds.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.gpudriver import revisions as rev
from gpuctl.rollout.actions import RestoreRevision
from gpuctl.rollout.event_notes import WARNING, EventNote
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.step.writes import written


def rollback(
    inp: RolloutInput,
    nodes: Mapping[str, NodeFacts],
    phases: Mapping[str, Phase],
    versions: Mapping[str, str],
) -> RestoreRevision | None:
    """onNodeFailure: Rollback: back to the previous revision once a node's load or
    verification failed at the target (it is Failed there after its KMM write)."""
    target = inp.target_version
    if not inp.settings.rolls_back or not target or inp.rollback.get("to") == target:
        return None
    if inp.rollback.get("gitops") and inp.rollback.get("from") == target:
        return None  # recorded, and left to Git (pass_holds.rollback_in_git_words)
    failed = sorted(
        name
        for name, phase in phases.items()
        if phase is Phase.FAILED
        and versions[name] == target
        and written(inp, nodes[name], target)
        and names.REBOOTED not in nodes[name].annotations  # the boot changed, not the version
    )
    if not failed:
        return None
    try:
        entry = rev.previous(inp.revisions, target)
        rev.restorable(entry)
    except rev.RevisionError:
        return None  # nothing to go back to: the failure budget pauses, as with Pause
    reasons = "; ".join(f"{name}: {nodes[name].reason}" for name in failed)
    to = str(entry[rev.VERSION])
    note = rev.rollback_note(
        from_version=target,
        to_version=to,
        revision=int(entry[rev.REVISION]),
        nodes=failed,
        reason=reasons,
    )
    words = (
        f"{target} failed on {', '.join(failed)} ({reasons}): rolling back to revision "
        f"{entry[rev.REVISION]} ({to}); the node(s) go back through the same checks, then the "
        "rollout pauses"
    )
    return RestoreRevision(entry, note, EventNote(WARNING, "RollingBack", words))
