"""Timing helpers shared by the benchmarks: repeated runs, percentiles, one-line summaries.

Benchmarks print figures; they never assert on time. Each compares against a baseline measured
in the same run on the same machine and prints the ratio, so a slow machine shifts both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """Wall-clock seconds of repeated runs of one thing."""

    label: str
    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def percentile(self, pct: float) -> float:
        """Nearest-rank percentile (pct in 0..100) of the runs."""
        ordered = sorted(self.seconds)
        rank = max(1, round(pct / 100 * len(ordered) + 0.4999))
        return ordered[min(rank, len(ordered)) - 1]

    def summary(self) -> str:
        return (
            f"{self.label}: median {self.median * 1e3:.1f} ms, "
            f"p95 {self.percentile(95) * 1e3:.1f} ms over {len(self.seconds)} runs"
        )


def measure(label: str, action: Callable[[], object], runs: int, warmup: int = 1) -> Timings:
    for _ in range(warmup):
        action()
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return Timings(label, tuple(seconds))


def measure_interleaved(
    actions: Mapping[str, Callable[[], object]], runs: int, warmup: int = 1
) -> list[Timings]:
    """Time several things in alternation (a, b, a, b, ...), so a change in the machine's load
    during the run weighs on each of them alike; one Timings per action, in order."""
    for _ in range(warmup):
        for action in actions.values():
            action()
    seconds: dict[str, list[float]] = {label: [] for label in actions}
    for _ in range(runs):
        for label, action in actions.items():
            started = time.perf_counter()
            action()
            seconds[label].append(time.perf_counter() - started)
    return [Timings(label, tuple(values)) for label, values in seconds.items()]


def ratio_line(subject: Timings, baseline: Timings) -> str:
    """`subject` relative to `baseline` by median: below 1.0 means faster than the baseline."""
    return (
        f"ratio {subject.label} / {baseline.label} (median): {subject.median / baseline.median:.2f}"
    )
