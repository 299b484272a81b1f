"""What one pass decides: the actions, the status, Events, when to look again, the revisions
and the rollback to make (Decision), and what one node's step adds to it (StepResult).
decide.py makes it; the controller carries it out (coordinator/rollout/act.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import Action, RestoreRevision
from gpuctl.rollout.event_notes import EventNote
from gpuctl.rollout.reasons import Wait


@dataclass
class StepResult:
    actions: list[Action] = field(default_factory=list)
    # Seconds until this node needs another look without any event (None: events suffice).
    wake_in: float | None = None

    def wake(self, seconds: float) -> None:
        seconds = max(0.05, seconds)
        self.wake_in = seconds if self.wake_in is None else min(self.wake_in, seconds)


@dataclass
class Decision:
    actions: list[Action] = field(default_factory=list)
    # status.rollout to write; None removes it (nothing to roll or remove).
    status: dict[str, Any] | None = None
    events: list[EventNote] = field(default_factory=list)
    requeue_after: float | None = None
    # status.revisions to write (None: unchanged).
    revisions: list[dict[str, Any]] | None = None
    # The rollback to make (onNodeFailure: Rollback), if any.
    rollback: RestoreRevision | None = None
    # A node would start but for the Prometheus gate's answer being older than the gate
    # allows: ask it afresh and decide again before acting.
    ask_gate: bool = False
    # Why each Pending or Blocked node that could start did not (starts.why_waiting).
    waits: dict[str, Wait] = field(default_factory=dict)
    # Each node in the rollout: its phase and the version KMM is asked for there once this
    # pass's writes are made (what the status counts; the metrics show them per node).
    node_phases: dict[str, Phase] = field(default_factory=dict)
    node_versions: dict[str, str] = field(default_factory=dict)

    def wake(self, seconds: float | None) -> None:
        if seconds is None:
            return
        self.requeue_after = (
            seconds if self.requeue_after is None else min(self.requeue_after, seconds)
        )

    def take(self, step: StepResult) -> None:
        self.actions.extend(step.actions)
        self.wake(step.wake_in)
