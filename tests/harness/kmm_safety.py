"""The safety record: every time the emulated KMM tries to take a kernel module off a node.

gpuctl promises that KMM never unloads or reloads ``xe`` on a node while its devices are in
use. A test tells the emulator which nodes are busy (``Busy``); the emulator records each
unload attempt (``UnloadAttempt``) - an unloader Pod's ``modprobe -r`` (nmc_reconciler.go,
N2/N4; worker.go :: UnloadKmod, W4) or a loader's removal of live in-tree modules before it
loads (worker.go :: LoadKmod, W1) - with why it happened (``Cause``), when, and whether the
node was busy then. An attempt while the node is *held* (a module refcount above zero) fails
with EBUSY and the worker retries (P3), so one unload may be several attempts: each is
recorded. An attempt while busy is what the promise forbids, whatever its outcome: a failed
one is retried and succeeds as soon as the holder lets go.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum


class Cause(StrEnum):
    """Why KMM unloads (the rule that removed the NMC spec entry, or the loader's step)."""

    CONFIG_CHANGE = "config change"  # N2: spec config != status config, same kernel
    UNTARGETED = "un-targeted"  # M1/M5: the selector no longer matches the node
    TAINT = "untolerated taint"  # M2: a NoSchedule/NoExecute taint the Module does not tolerate
    MODULE_DELETED = "module deleted"  # M7: finalizeModule removed the spec entry
    VERSION_CHANGE = "version change"  # M5: version set, worker version label absent
    NO_KERNEL_MAPPING = "no kernel mapping"  # M5: no kernelMapping matches the node's kernel
    IN_TREE_REMOVAL = "in-tree removal by a loader"  # W1
    UNKNOWN = "unknown"  # an orphan status whose spec entry the emulator did not see go


@dataclass(frozen=True)
class Busy:
    """A node's devices are in use (``reason``); ``held``: the module's refcount is held, so
    ``modprobe -r`` fails with EBUSY (kmod tools/modprobe.c :: rmmod_do_module)."""

    reason: str
    held: bool = False


@dataclass(frozen=True)
class UnloadAttempt:
    """One ``modprobe -r`` KMM ran on ``node`` for Module ``module``."""

    node: str
    module: str
    cause: Cause
    kernel_modules: tuple[str, ...]  # what it tried to remove, in order
    at: float  # the emulator's clock
    busy: Busy | None  # the node's state at that moment
    succeeded: bool  # False: EBUSY, the worker retries
    attempt: int  # 1 for the worker's first run, then one more per restart

    @property
    def while_busy(self) -> bool:
        return self.busy is not None


class UnloadRecord:
    """Thread-safe list of ``UnloadAttempt``s, in the order they happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: list[UnloadAttempt] = []

    def add(self, attempt: UnloadAttempt) -> None:
        with self._lock:
            self._attempts.append(attempt)

    def attempts(self) -> list[UnloadAttempt]:
        with self._lock:
            return list(self._attempts)

    def while_busy(self) -> list[UnloadAttempt]:
        return [attempt for attempt in self.attempts() if attempt.while_busy]

    def assert_none_while_busy(self) -> None:
        """Raises AssertionError listing every attempt made while its node was busy."""
        offending = self.while_busy()
        if offending:
            lines = "\n".join(
                f"  {a.node}: {a.cause} of {list(a.kernel_modules)} for Module {a.module} "
                f"(attempt {a.attempt}, {'unloaded' if a.succeeded else 'EBUSY'}) "
                f"while busy: {a.busy.reason if a.busy else ''}"
                for a in offending
            )
            raise AssertionError(f"KMM tried to unload while the node was busy:\n{lines}")
