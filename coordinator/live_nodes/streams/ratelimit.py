"""A token bucket: at most `rate_per_minute` events per minute, bursts up to `burst`.

Pure arithmetic over a clock passed in, so tests drive time by hand.
"""

from __future__ import annotations

from collections.abc import Callable


class TokenBucket:
    """`take()` is True when an event may pass now (and spends a token)."""

    def __init__(self, rate_per_minute: float, burst: float, clock: Callable[[], float]) -> None:
        if rate_per_minute <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self._per_second = rate_per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._per_second)
        self._last = now

    def take(self) -> bool:
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def available(self) -> bool:
        """A token could be taken now (without taking it)."""
        self._refill()
        return self._tokens >= 1.0
