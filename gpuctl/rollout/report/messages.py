"""The rollout's message and its Events, in an admin's words (pure): what holds it (the Hold's
words), or how far it got; an Event whenever its state changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.common import names
from gpuctl.rollout.event_notes import NORMAL, WARNING, EventNote
from gpuctl.rollout.fleet.pass_holds import Gates, rollback_words
from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.place.counts import RolloutCounts
from gpuctl.rollout.reasons import Hold, HoldKind, RolloutState


def rollout_message(
    inp: RolloutInput,
    gates: Gates,
    counts: RolloutCounts,
    bound: int,
) -> str:
    target = inp.target_version or names.REMOVAL_VERSION
    hold = gates.load
    if hold is not None and hold.kind in (HoldKind.FAILURE_BUDGET, HoldKind.PAUSED):
        return f"{target}: {hold.words}"
    if not inp.target_version:
        words = f"unloading the driver from {counts.removing} node(s), at most {bound} at once"
        return f"{words}; {hold.words}" if hold is not None else words
    return _progress_words(target, hold, counts, bound, inp.rollback)


def _progress_words(
    target: str,
    hold: Hold | None,
    counts: RolloutCounts,
    bound: int,
    rollback: Mapping[str, Any],
) -> str:
    removals = f"; unloading the driver from {counts.removing} node(s)" if counts.removing else ""
    if not counts.total and not counts.removing:
        return f"no node is wanted for {target}"
    rolled_back = (HoldKind.ROLLING_BACK, HoldKind.ROLLED_BACK)
    if counts.total and counts.updated == counts.total and not counts.removing:
        if hold is not None and hold.kind in rolled_back:
            return rollback_words(HoldKind.ROLLED_BACK, rollback)
        return f"all {counts.total} nodes run {target}"
    if hold is not None:
        words = hold.words
    else:
        words = f"{counts.updated}/{counts.total} at {target}, at most {bound} unavailable at once"
        if counts.blocked:
            words += f"; {counts.blocked} blocked"
    return words + removals


def driver_events(inp: RolloutInput, status: Mapping[str, Any]) -> list[EventNote]:
    """An Event when the rollout's state changes (held, paused, failed, complete)."""
    before = inp.previous_status
    state = status.get("state")
    if before.get("state") == state and before.get("targetVersion") == status.get("targetVersion"):
        return []
    kind = WARNING if state == RolloutState.FAILED else NORMAL
    return [EventNote(kind, f"Rollout{state}", f"{status['targetVersion']}: {status['message']}")]
