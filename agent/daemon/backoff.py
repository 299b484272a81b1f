"""Reconnect delays: capped exponential backoff with full jitter.

Every agent of a fleet loses the coordinator at the same moment (a rollout of the
coordinator, a network blip), so each retry waits a uniformly random time in
[0, min(cap, initial * 2**attempt)] ("full jitter"): the reconnects spread out instead of
arriving in waves. Pure; the random source is a parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delays for attempt 0, 1, 2, ... (attempt 0 is the first retry after a failure)."""

    initial: float
    cap: float

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.cap < self.initial:
            raise ValueError(f"backoff needs 0 < initial <= cap, got {self.initial}, {self.cap}")

    def ceiling(self, attempt: int) -> float:
        """The largest delay attempt `attempt` may wait."""
        # 2**attempt overflows float long after it passes any sane cap: stop doubling early.
        doublings = min(attempt, 64)
        return min(self.cap, self.initial * 2.0**doublings)

    def delay(self, attempt: int, uniform: Callable[[float, float], float]) -> float:
        """A full-jitter delay for `attempt`; `uniform(a, b)` is e.g. random.uniform."""
        return uniform(0.0, self.ceiling(attempt))
