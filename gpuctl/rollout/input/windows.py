"""Maintenance windows (`spec.rollout.maintenanceWindows`): when a rollout may start nodes.

A window recurs on the listed days of the week: it opens at `start` (HH:MM, wall time in
`timeZone`, an IANA name read through the standard library's zoneinfo) and stays open for
`duration` of elapsed time. New nodes start only while a window is open; a node in a step
finishes it. Across a daylight saving change the wall time decides when a window opens and
the elapsed time how long it lasts:

- a start in the hour that is skipped (spring forward: 02:30 on the last Sunday of March in
  Europe/Berlin) opens when that wall time would have been, one hour later by the new
  clock (03:30 CEST), as Python reads a nonexistent wall time (fold=0: the offset before the
  change);
- a start in the hour that repeats (fall back: 02:30 on the last Sunday of October) opens at
  its first occurrence (CEST), and a `duration` of 2h then ends at 03:30 CET.

Pure: the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from gpuctl.common import timestamps
from gpuctl.gpudriver.model import WEEKDAYS

DAYS = WEEKDAYS
# The gate of decide.py while every window is closed.
OUTSIDE_WINDOWS = "outside the maintenance windows"
# The longest window: a week (longer would always be open; say so with no windows at all).
MAX_DURATION = timedelta(days=7)


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # date.weekday(): Mon=0 .. Sun=6
    start: time
    duration: timedelta
    zone: ZoneInfo

    def opening_on(self, day: date) -> datetime | None:
        """When the window opens on local `day` (UTC), or None when it does not open then."""
        if day.weekday() not in self.days:
            return None
        return datetime.combine(day, self.start, tzinfo=self.zone).astimezone(UTC)


@dataclass(frozen=True)
class WindowState:
    """Whether a window is open at a moment; when it closes (open) or next opens (closed)."""

    open: bool
    closes_at: datetime | None = None
    opens_at: datetime | None = None


def _openings(windows: Sequence[Window], first: date, last: date) -> list[tuple[datetime, Window]]:
    out = []
    day = first
    while day <= last:
        for window in windows:
            opening = window.opening_on(day)
            if opening is not None:
                out.append((opening, window))
        day += timedelta(days=1)
    return sorted(out, key=lambda pair: pair[0])


def window_state(windows: Sequence[Window], now: datetime) -> WindowState:
    """Open when some window's opening is at most its duration before `now`; with several
    open, it closes when the last of them does. Closed: the next opening after `now`."""
    now = now.astimezone(UTC)
    # Local dates around now in every zone; one day either side covers any UTC offset.
    today = now.date()
    back = MAX_DURATION.days + 2
    past = _openings(windows, today - timedelta(days=back), today + timedelta(days=1))
    closes = [start + w.duration for start, w in past if start <= now < start + w.duration]
    if closes:
        return WindowState(open=True, closes_at=max(closes))
    future = _openings(windows, today - timedelta(days=1), today + timedelta(days=9))
    opens = [start for start, _ in future if start > now]
    return WindowState(open=False, opens_at=min(opens) if opens else None)


def window_status(state: WindowState) -> dict[str, object]:
    """status.rollout.maintenanceWindow: open, and when it closes or next opens (RFC 3339)."""
    out: dict[str, object] = {"open": state.open}
    if state.closes_at is not None:
        out["closesAt"] = timestamps.format_seconds(state.closes_at)
    if state.opens_at is not None:
        out["nextOpensAt"] = timestamps.format_seconds(state.opens_at)
    return out


def window_words(state: WindowState) -> str:
    """Why no node starts now, and until when."""
    if state.opens_at is None:
        return f"{OUTSIDE_WINDOWS}; none opens in the next week"
    return (
        f"{OUTSIDE_WINDOWS}: no new node starts (nodes in a step finish it); the next "
        f"opens at {timestamps.format_seconds(state.opens_at)}"
    )
