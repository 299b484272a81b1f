"""The token bucket, driven by a manual clock."""

from __future__ import annotations

import pytest

from coordinator.live_nodes.streams.ratelimit import TokenBucket
from tests.support.clock import ManualClock


def test_burst_then_refill_at_the_rate() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate_per_minute=6, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.advance(9.9)
    assert not bucket.available()
    clock.advance(0.2)  # 6 per minute: one token every 10 s
    assert bucket.take()
    assert not bucket.take()
    clock.advance(3600)  # never more than the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="positive rate"):
        TokenBucket(0, 1, ManualClock())
    with pytest.raises(ValueError, match="burst of at least 1"):
        TokenBucket(10, 0.5, ManualClock())
