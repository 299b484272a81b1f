"""A GPUDriver's rollout as `gpuctl rollout status` shows it. Pure: objects in, text out.

Reads `status.rollout`, which the coordinator writes: target version, state (a
gpuctl.rollout.reasons.RolloutState; one this build does not know is shown as written and is
not done), counts per node phase, and the nodes that are not done
with their phase, reason and since-when. Under the hold (status.rollout.holdKind) and under each
Blocked node (its `kind`) goes the kind's remedy in one line, with where the troubleshooting
page says more (gpuctl/rollout/remedies/).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuctl.cli.durations import short_age
from gpuctl.cli.table import format_table
from gpuctl.common import names, timestamps
from gpuctl.rollout.reasons import (
    HoldKind,
    RolloutState,
    parse_block_kind,
    parse_hold_kind,
    parse_state,
)
from gpuctl.rollout.remedies import remedy_line

# Exit codes of `gpuctl rollout status`; EXIT_NEEDS_YOU ends `--watch` at a state that waits for
# a person (`needs_you`).
EXIT_COMPLETE, EXIT_FAILED, EXIT_NOT_DONE, EXIT_NEEDS_YOU = 0, 1, 3, 4
# Phases of a node the rollout has no more work for.
_SETTLED = frozenset({"Done", "Skipped"})
_BLOCKED = "Blocked"


@dataclass(frozen=True)
class NodeProgress:
    name: str
    phase: str
    reason: str
    since: datetime.datetime | None
    # Why a node that could have started did not, in the coordinator's last pass ("": none).
    waiting: str = ""
    # A Blocked node's reason kind, as written (a BlockKind value; "": none written).
    kind: str = ""

    @property
    def why(self) -> str:
        """Its reason and what it waits for, in words ("-" for neither)."""
        parts = [self.reason, f"waiting: {self.waiting}" if self.waiting else ""]
        return "; ".join(part for part in parts if part) or "-"

    @property
    def remedy(self) -> str:
        """A Blocked node's remedy line (one an older coordinator wrote no kind of: the
        unrecorded kind's); "" for any other node."""
        if self.phase != _BLOCKED:
            return ""
        return remedy_line(parse_block_kind(self.kind))


@dataclass(frozen=True)
class RolloutView:
    driver: str
    target_version: str
    # As written (shown as is), and as this build reads it (None: unknown to it).
    state: str
    message: str = ""
    known_state: RolloutState | None = None
    total: int = 0
    updated: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    nodes: tuple[NodeProgress, ...] = ()
    started_at: datetime.datetime | None = None
    # status.rollout.maintenanceWindow: open or not (None: no windows), and when it closes or
    # the next opens.
    window_open: bool | None = None
    window_change: datetime.datetime | None = None
    # status.rollout.holdKind: what keeps new nodes from starting ("": nothing).
    hold_kind: str = ""


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def from_gpudriver(obj: Mapping[str, Any]) -> RolloutView | None:
    """The rollout of a GPUDriver object; None when it has no versioned rollout."""
    name = str(obj.get("metadata", {}).get("name", ""))
    rollout = (obj.get("status") or {}).get("rollout")
    if not isinstance(rollout, Mapping) or not rollout.get("targetVersion"):
        return None
    raw_counts = rollout.get("counts")
    counts = (
        {str(k): _int(v) for k, v in raw_counts.items()} if isinstance(raw_counts, Mapping) else {}
    )
    nodes = tuple(
        NodeProgress(
            name=str(node.get("name", "")),
            phase=str(node.get("phase", "")),
            reason=str(node.get("reason", "")),
            since=timestamps.parse_or_none(node.get("since")),
            waiting=str(node.get("waiting", "")),
            kind=str(node.get("kind") or ""),
        )
        for node in rollout.get("nodes") or []
        if isinstance(node, Mapping)
    )
    return RolloutView(
        driver=name,
        target_version=str(rollout["targetVersion"]),
        state=str(rollout.get("state", "")),
        message=str(rollout.get("message", "")),
        known_state=parse_state(rollout.get("state")),
        total=_int(rollout.get("total")),
        updated=_int(rollout.get("updated")),
        counts=counts,
        nodes=nodes,
        started_at=timestamps.parse_or_none(rollout.get("startedAt")),
        hold_kind=str(rollout.get("holdKind") or ""),
        **_window(rollout.get("maintenanceWindow")),
    )


def removal_finished(obj: Mapping[str, Any]) -> bool:
    """A GPUDriver being deleted whose removal is over: the coordinator clears status.rollout
    once no node is left with its driver (unloaded, each through its checks), then releases the
    GPUDriver's finalizer, and the object is gone."""
    deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
    return deleting and not (obj.get("status") or {}).get("rollout")


def removal_line(name: str) -> str:
    return f"GPUDriver {name} is deleted: no node has its driver any more\n"


def _window(raw: object) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("open"), bool):
        return {}
    when = raw.get("closesAt") if raw["open"] else raw.get("nextOpensAt")
    return {"window_open": raw["open"], "window_change": timestamps.parse_or_none(when)}


def window_line(view: RolloutView, now: datetime.datetime) -> str:
    """The maintenance window in words ("" without windows)."""
    if view.window_open is None:
        return ""
    change = view.window_change
    if view.window_open:
        until = f" until {timestamps.format_seconds(change)}" if change else ""
        return f"  maintenance window: open{until}\n"
    if change is None:
        return "  maintenance window: closed, none opens in the next week\n"
    return (
        f"  maintenance window: closed, the next opens at {timestamps.format_seconds(change)} "
        f"(in {short_age(change - now)})\n"
    )


def hold_remedy(view: RolloutView) -> str:
    """The remedy line of what holds the rollout ("" when nothing does, or a hold this build
    does not know)."""
    kind = parse_hold_kind(view.hold_kind) if view.hold_kind else None
    return remedy_line(kind) if kind is not None else ""


def summary_line(view: RolloutView, now: datetime.datetime) -> str:
    line = (
        f"Rollout of {view.driver} to {view.target_version}: {view.state or 'unknown'}, "
        f"{view.updated} of {view.total} nodes updated"
    )
    if view.started_at is not None:
        line += f" (started {short_age(now - view.started_at)} ago)"
    return line + (f": {view.message}" if view.message else "")


def time_left(view: RolloutView, now: datetime.datetime) -> str:
    """The time the nodes left would take at the pace of those already done ("": no pace yet)."""
    left = view.total - view.updated
    if view.started_at is None or view.updated <= 0 or left <= 0:
        return ""
    pace = (now - view.started_at) / view.updated
    return f" (about {short_age(pace * left)} left, at {short_age(pace)} a node)"


def needs_you(view: RolloutView) -> str:
    """What a person must do for the rollout to go on, in words; "" while it goes on by itself
    (or is over: `exit_code`). Held after its first node, paused, refused, rolled back, no node
    targeted, or every node left Blocked: `gpuctl rollout status --watch` ends there."""
    name = view.driver
    resume = f"`gpuctl rollout resume {name}`"
    if view.known_state is RolloutState.NO_NODES:
        return (
            "no node is targeted: no node matches the GPUDriver's nodeSelector, or every one "
            "opted out; `gpuctl nodes` lists the GPU nodes and their labels"
        )
    if view.known_state is RolloutState.HELD and view.hold_kind == HoldKind.AFTER_FIRST_NODE:
        return f"held after its first node: check it, then {resume} for the rest"
    if view.known_state is RolloutState.PAUSED:
        return _paused(view, resume)
    if view.known_state is RolloutState.PROGRESSING:
        waiting = {phase for phase, n in view.counts.items() if n} - _SETTLED
        if waiting == {"Blocked"}:
            return (
                f"every node left is Blocked: `gpuctl rollout status {name}` says by what; a "
                "node goes on by itself once that is gone (`gpuctl node inspect NODE`)"
            )
    return ""


def acted_on(obj: Mapping[str, Any], view: RolloutView) -> bool:
    """The person a status waits for has already acted, and the coordinator's next pass has
    not written it yet: `gpuctl rollout resume` released this target (the resumed-version
    annotation) under a hold after the first node or a rollback, or spec.rollout.paused is
    off under a pause. `--watch` waits for that pass instead of ending on the old status."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    resumed = annotations.get(names.RESUMED_VERSION) == view.target_version
    if view.hold_kind in (
        HoldKind.AFTER_FIRST_NODE,
        HoldKind.ROLLED_BACK,
        HoldKind.ROLLBACK_IN_GIT,
    ):
        return resumed
    if view.hold_kind == HoldKind.PAUSED:
        rollout = (obj.get("spec") or {}).get("rollout") or {}
        return not rollout.get("paused")
    return False


def awaits_first_status(obj: Mapping[str, Any]) -> bool:
    """A GPUDriver with a version to roll out whose coordinator has not written its first
    status yet (just applied): `--watch` waits for it."""
    spec = obj.get("spec") or {}
    version = (spec.get("kernelModule") or {}).get("version")
    return bool(version) and not (obj.get("status") or {}).get("rollout")


def _paused(view: RolloutView, resume: str) -> str:
    if view.hold_kind == HoldKind.REFUSED:
        return f"refused: fix the GPUDriver's spec.rollout ({view.message})"
    if view.hold_kind in (HoldKind.ROLLED_BACK, HoldKind.ROLLBACK_IN_GIT):
        return f"rolled back: {view.message}; {resume} goes on with the target"
    return f"paused: {resume} to go on"


def render_status(view: RolloutView, now: datetime.datetime) -> str:
    parts = [summary_line(view, now) + "\n", window_line(view, now)]
    hold = hold_remedy(view)
    if hold:
        parts.append(f"  {hold}\n")
    busy = {phase: n for phase, n in sorted(view.counts.items()) if n and phase != "Done"}
    if busy:
        parts.append("  " + ", ".join(f"{phase} {n}" for phase, n in busy.items()) + "\n")
    if view.nodes:
        rows = [
            [
                node.name,
                node.phase,
                short_age(now - node.since) if node.since else "<none>",
                node.why,
            ]
            for node in view.nodes
        ]
        table = format_table(["NODE", "PHASE", "SINCE", "REASON"], rows).splitlines()
        lines = table[:1]
        for node, row in zip(view.nodes, table[1:], strict=True):
            lines += [row, f"  {node.remedy}"] if node.remedy else [row]
        parts.append("\n" + "".join(f"{line}\n" for line in lines))
    return "".join(parts)


def node_changes(before: RolloutView | None, after: RolloutView) -> list[NodeProgress]:
    """Nodes whose phase, reason or wait differ from `before` (all of them without `before`)."""
    seen = {(n.name, n.phase, n.why) for n in before.nodes} if before else set()
    return [n for n in after.nodes if (n.name, n.phase, n.why) not in seen]


def watch_lines(before: RolloutView | None, after: RolloutView, now: datetime.datetime) -> str:
    """What `--watch` prints for a change of the rollout: its summary and the time left, when
    the summary changed; the hold's remedy, when the hold changed; each node that changed, a
    Blocked one with its remedy."""
    lines = []
    if before is None or summary_line(after, now) != summary_line(before, now):
        lines.append(summary_line(after, now) + time_left(after, now))
    hold = hold_remedy(after)
    if hold and (before is None or before.hold_kind != after.hold_kind):
        lines.append(f"  {hold}")
    for node in node_changes(before, after):
        why = f" ({node.why})" if node.why != "-" else ""
        lines.append(f"  {node.name}: {node.phase}{why}")
        if node.remedy:
            lines.append(f"    {node.remedy}")
    return "".join(f"{line}\n" for line in lines)


def exit_code(view: RolloutView) -> int | None:
    """0 complete, 1 failed, None while the rollout still has work (or waits for the admin)."""
    if view.known_state is RolloutState.COMPLETE:
        return EXIT_COMPLETE
    if view.known_state is RolloutState.FAILED:
        return EXIT_FAILED
    return None
