"""The kernel-boundary record: every module load and removal a node's ``modprobe`` attempted.

The fake ``modprobe`` appends one JSON line per attempt to the kubelet's record file (with
``flock``: several worker Pods run at once), naming the node, the Pod, what it tried, whether
the node was busy at that moment and why, and how it ended. Tests read it back as
``KernelCall``s; ``assert_no_unload_while_busy`` is the oracle every rollout test ends with:
gpuctl promises that no unload is even attempted on a busy node, whatever its outcome (a
refused one is retried by the Pod's restarts and succeeds as soon as the holder lets go). The
one race no controller wins, a host process opening the device a moment before KMM's worker
tries, is for a world run to count (testbed/world/invariants.py).
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

LOAD = "load"
UNLOAD = "unload"


@dataclass(frozen=True)
class KernelCall:
    """One ``modprobe`` on ``node``: ``action`` LOAD or UNLOAD of ``modules``."""

    node: str
    pod: str
    action: str
    modules: tuple[str, ...]
    busy: tuple[str, ...]  # why an unload would fail or hurt at that moment (loads: empty)
    succeeded: bool
    error: str  # kmod's words when it failed
    version: str  # a load's module version; an unload's version of what was live
    at: float  # time.time() of the attempt

    @property
    def while_busy(self) -> bool:
        return self.action == UNLOAD and bool(self.busy)

    def describe(self) -> str:
        outcome = "ok" if self.succeeded else f"failed: {self.error}"
        why = f" while busy: {'; '.join(self.busy)}" if self.busy else ""
        return f"{self.node}: {self.action} {list(self.modules)} by {self.pod} ({outcome}){why}"


def append(record: Path, call: KernelCall) -> None:
    line = json.dumps({**asdict(call), "modules": list(call.modules), "busy": list(call.busy)})
    with record.open("a") as stream:
        fcntl.flock(stream, fcntl.LOCK_EX)
        stream.write(line + "\n")


def read(record: Path) -> list[KernelCall]:
    """Every call so far, in order."""
    if not record.exists():
        return []
    calls = []
    for line in record.read_text().splitlines():
        if line.strip():
            data = json.loads(line)
            data["modules"] = tuple(data["modules"])
            data["busy"] = tuple(data["busy"])
            calls.append(KernelCall(**data))
    return calls


def unloads_while_busy(record: Path) -> list[KernelCall]:
    return [call for call in read(record) if call.while_busy]


def never(_call: KernelCall) -> bool:
    return False


def assert_no_unload_while_busy(
    record: Path, excused: Callable[[KernelCall], bool] = never
) -> None:
    """Raises AssertionError listing every unload attempted while its node was busy, but those
    `excused` (a world run's, which its report has already: testbed/world/invariants.py
    `Checks.judged`)."""
    offending = [call for call in unloads_while_busy(record) if not excused(call)]
    if offending:
        lines = "\n".join(f"  {call.describe()}" for call in offending)
        raise AssertionError(f"KMM tried to unload while the node was busy:\n{lines}")
