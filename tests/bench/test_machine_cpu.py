"""bench/machine_cpu.py: the machine's busy share between two readings of /proc/stat (idle and
iowait are idle; guest time is not counted twice), and a clear error for a file without the
aggregate line or readings with no time between them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.machine_cpu import CpuTimes, busy, cpu_times

STAT = """\
cpu  100 10 40 800 50 0 0 0 30 0
cpu0 50 5 20 400 25 0 0 0 15 0
intr 12345
"""


def test_the_aggregate_line_is_read(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    assert cpu_times(stat) == CpuTimes(total=1000, idle=850)


def test_busy_is_the_share_not_idle() -> None:
    assert busy(CpuTimes(1000, 850), CpuTimes(1400, 950)) == 0.75


def test_no_aggregate_line_and_no_time_are_errors(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu0 1 2 3 4\n")
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        cpu_times(stat)
    with pytest.raises(ValueError, match="no CPU time passed"):
        busy(CpuTimes(10, 5), CpuTimes(10, 5))


def test_this_machine_can_be_read() -> None:
    now = cpu_times()
    assert now.total > now.idle > 0
