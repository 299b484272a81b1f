"""The benchmarks' statistics (bench/timing.py): percentiles and ratios over known samples."""

from __future__ import annotations

from bench.timing import Timings, measure_interleaved, ratio_line


def test_percentiles_use_nearest_rank() -> None:
    runs = Timings("x", tuple(float(n) for n in range(1, 101)))
    assert runs.median == 50.5
    assert runs.percentile(95) == 95.0
    assert runs.percentile(99) == 99.0
    assert runs.percentile(100) == 100.0


def test_percentile_of_few_runs_is_the_largest_at_the_tail() -> None:
    runs = Timings("x", (0.3, 0.1, 0.2))
    assert runs.percentile(95) == 0.3
    assert runs.percentile(50) == 0.2


def test_ratio_is_subject_over_baseline() -> None:
    fast = Timings("ours", (1.0, 1.0, 1.0))
    slow = Timings("fuser", (4.0, 4.0, 4.0))
    assert ratio_line(fast, slow).endswith(": 0.25")


def test_interleaved_runs_alternate_and_keep_their_order() -> None:
    calls: list[str] = []
    first, second = measure_interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, runs=3, warmup=1
    )
    assert calls == ["a", "b"] * 4
    assert (first.label, len(first.seconds)) == ("a", 3)
    assert (second.label, len(second.seconds)) == ("b", 3)
