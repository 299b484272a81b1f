"""Full-jitter backoff: ceilings double up to the cap, delays are uniform below them."""

from __future__ import annotations

import pytest

from agent.daemon.backoff import Backoff


def test_ceilings_double_from_initial_up_to_the_cap() -> None:
    backoff = Backoff(initial=1.0, cap=60.0)
    assert [backoff.ceiling(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.ceiling(10_000) == 60.0


def test_a_delay_is_drawn_between_zero_and_the_ceiling() -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        drawn.append((low, high))
        return high / 2

    backoff = Backoff(initial=0.5, cap=4.0)
    assert [backoff.delay(n, uniform) for n in range(5)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert drawn == [(0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 4.0), (0.0, 4.0)]


@pytest.mark.parametrize(("initial", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_nonsense_bounds_are_refused(initial: float, cap: float) -> None:
    with pytest.raises(ValueError, match="0 < initial <= cap"):
        Backoff(initial=initial, cap=cap)
