"""CPU time by process over a stretch of a bench, from /proc/<pid>/stat.

bench.machine_cpu says how busy the machine's CPUs were in each run; this says whose the time
was: the API server, etcd, KMM's manager, the coordinator, the bench itself (its simulated
agents and KMM's worker Pods' kubelet), the scheduler, the kernel's own threads. Where
gpuctl's rollout and the floor take KMM different times on this shared machine, the processes
whose CPU grew are what KMM shared its cores with.

`process_cpu` reads every process's CPU ticks (its own and its waited-for children's, so a
worker binary that ran and exited counts in the process that ran it); `cpu_by_name` gives the
seconds each name used between two readings. A process is named by its command (`comm`),
a Python one by the module it runs (`-m`) or its script, a kernel thread `[kernel]`. Pass the
/proc folder: tests use their own.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
KERNEL = "[kernel]"
# Fields of /proc/<pid>/stat after the ")" closing comm (proc(5) numbers minus 3).
_UTIME, _STIME, _CUTIME, _CSTIME, _STARTTIME = 11, 12, 13, 14, 19


@dataclass(frozen=True)
class ProcessCpu:
    name: str
    ticks: int


def process_name(comm: str, argv: list[str]) -> str:
    """What to call a process in the report."""
    if not argv:
        return KERNEL
    if not comm.startswith("python"):
        return comm
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    if "-c" in argv and "multiprocessing" in " ".join(argv):
        return "multiprocessing"
    scripts = [arg for arg in argv[1:] if not arg.startswith("-")]
    return Path(scripts[0]).name if scripts else comm


def _read(folder: Path) -> tuple[tuple[int, int], ProcessCpu] | None:
    try:
        stat = (folder / "stat").read_text()
        argv = (folder / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None  # gone meanwhile, or not ours to read
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = sum(int(fields[i]) for i in (_UTIME, _STIME, _CUTIME, _CSTIME))
    args = [arg.decode(errors="replace") for arg in argv if arg]
    return (int(folder.name), int(fields[_STARTTIME])), ProcessCpu(process_name(comm, args), ticks)


def process_cpu(proc: Path = PROC) -> dict[tuple[int, int], ProcessCpu]:
    """Every process's CPU ticks now, by (pid, start time): a reused pid is another process."""
    found = {}
    for folder in proc.iterdir():
        if folder.name.isdigit():
            read = _read(folder)
            if read is not None:
                found[read[0]] = read[1]
    return found


def cpu_by_name(
    before: dict[tuple[int, int], ProcessCpu],
    after: dict[tuple[int, int], ProcessCpu],
    ticks_per_second: int | None = None,
) -> dict[str, float]:
    """CPU seconds each name used between the two readings, most first. A process that
    started meanwhile counts whole; one that ended meanwhile counts in whoever waited for it."""
    per_second = ticks_per_second or os.sysconf("SC_CLK_TCK")
    used: dict[str, int] = defaultdict(int)
    for key, now in after.items():
        then = before.get(key)
        used[now.name] += now.ticks - (then.ticks if then is not None else 0)
    ranked = sorted(used.items(), key=lambda item: (-item[1], item[0]))
    return {name: ticks / per_second for name, ticks in ranked if ticks > 0}


def cpu_words(runs: dict[str, dict[str, float]], top: int = 10) -> str:
    """The `top` names by CPU in the first run, each with its seconds in every run ("a vs b"),
    then the rest summed: "kube-apiserver 120.1 vs 60.2, ..., the rest 3.0 vs 2.5"."""
    if not runs:
        return ""
    first = next(iter(runs.values()))
    named = sorted(
        {name for used in runs.values() for name in used},
        key=lambda name: (-first.get(name, 0.0), name),
    )[:top]

    def seconds(used: dict[str, float], names: list[str] | None = None) -> float:
        if names is None:
            return sum(v for n, v in used.items() if n not in named)
        return sum(used.get(n, 0.0) for n in names)

    parts = [f"{n} " + " vs ".join(f"{seconds(u, [n]):.1f}" for u in runs.values()) for n in named]
    parts.append("the rest " + " vs ".join(f"{seconds(u):.1f}" for u in runs.values()))
    return ", ".join(parts)
