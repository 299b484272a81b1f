"""How busy the machine's CPUs were over a stretch of a bench, from /proc/stat.

The fleet bench runs everything on one machine: the control plane, KMM's manager and its worker
Pods, the coordinator and the simulated agents. When gpuctl's rollout and the floor take KMM
different times, how busy the machine was in each says whether KMM waited for CPU the other
run did not use. `cpu_times` reads the counters (pass the file: tests use their own);
`busy` says which share of all CPUs' time between two readings was not idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
IDLE_FIELDS = (3, 4)  # idle, iowait: the 4th and 5th numbers of the "cpu" line


@dataclass(frozen=True)
class CpuTimes:
    """All CPUs' time in clock ticks since boot: in all, and idle."""

    total: int
    idle: int


def cpu_times(stat: Path = PROC_STAT) -> CpuTimes:
    for line in stat.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(value) for value in fields[1:]]
            # guest time is counted in user time already (proc(5)): not twice.
            counted = ticks[:8]
            return CpuTimes(sum(counted), sum(ticks[i] for i in IDLE_FIELDS))
    raise ValueError(f"{stat} has no aggregate 'cpu' line")


def busy(before: CpuTimes, after: CpuTimes) -> float:
    """The share (0..1) of the CPUs' time between two readings that was not idle."""
    total = after.total - before.total
    if total <= 0:
        raise ValueError("no CPU time passed between the two readings")
    return 1 - (after.idle - before.idle) / total
