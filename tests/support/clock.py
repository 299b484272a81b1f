"""The one hand-driven clock of the unit tests: monotonic seconds and wall time together.

Code under test takes its clocks as arguments; a test passes `clock` where a monotonic
`() -> float` is wanted and `clock.wall` where a `() -> datetime` is, and moves both with
`advance`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ManualClock:
    """Monotonic seconds and wall time that move only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._wall_zero = datetime(2026, 11, 29, 23, 0, tzinfo=UTC)

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return self._wall_zero + timedelta(seconds=self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds
