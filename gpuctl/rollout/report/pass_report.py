"""The report stage of one pass (pure): status.rollout, its message, the maintenance window,
the Events and status.revisions, all from the same facts as the pass's actions.

The message says what holds the rollout (messages.py) and, when nodes wait only for the
unavailable ones, which; the status is status.py's; a state change is an Event
(messages.py); the target's revision is recorded with how many nodes it reached (history.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpuctl.common import timestamps
from gpuctl.common.names import Phase
from gpuctl.gpudriver import revisions as rev
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.fleet.pass_holds import Gates
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.input.windows import WindowState, window_status
from gpuctl.rollout.place.counts import RolloutCounts
from gpuctl.rollout.reasons import Hold, HoldKind, RolloutState
from gpuctl.rollout.report.history import recorded
from gpuctl.rollout.report.messages import driver_events, rollout_message
from gpuctl.rollout.report.status import rollout_status


def report_pass(
    inp: RolloutInput,
    decision: Decision,
    *,
    phases: Mapping[str, Phase],
    counts: RolloutCounts,
    gates: Gates,
    bound: int,
    held_back: str,
    window: WindowState | None,
    rollout: Sequence[NodeFacts],
) -> None:
    """The pass's status, Events and revisions into `decision` (`held_back`: the nodes that
    wait only for the unavailable ones; `rollout`: the rollout's nodes as read)."""
    message = rollout_message(inp, gates, counts, bound)
    if held_back and not counts.in_progress:
        message += f"; waiting: already unavailable: {held_back}"
    decision.status = rollout_status(inp, phases, counts, message, gates.load, waits=decision.waits)
    if window is not None:
        decision.status["maintenanceWindow"] = window_status(window)
    decision.events.extend(driver_events(inp, decision.status))
    _history(inp, counts, rollout, decision)


def report_refused(
    inp: RolloutInput,
    decision: Decision,
    *,
    phases: Mapping[str, Phase],
    counts: RolloutCounts,
    why: str,
) -> None:
    """The status of a pass whose spec.rollout cannot be applied (`why`): refused, nothing
    starts."""
    hold = Hold(HoldKind.REFUSED, why)
    decision.status = rollout_status(inp, phases, counts, why, hold)


def _history(
    inp: RolloutInput, counts: RolloutCounts, rollout: Sequence[NodeFacts], decision: Decision
) -> None:
    """status.revisions with this pass's target recorded (`rollout`: its nodes as read, the
    Done ones counted at the version they are Done at)."""
    if not inp.target_version or decision.status is None:
        return
    history = recorded(
        inp.revisions,
        version=inp.target_version,
        kernel_module=inp.kernel_module,
        updated=counts.updated,
        complete=decision.status["state"] == RolloutState.COMPLETE,
        started=decision.status["startedAt"],
        now=timestamps.format_seconds(inp.now),
        done_at=Counter(n.state_version for n in rollout if n.phase is Phase.DONE),
    )
    if history != rev.ordered(inp.revisions):
        decision.revisions = history
