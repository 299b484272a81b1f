"""A Coordinator whose change handlers count what they ask for, for unit tests of them.

Not leading, so no caches are behind it: the rollout passes and the asks to look at every
GPUDriver (`_enqueue_all`) a change handler makes are counted instead of carried out; its own
work queue is real, on the clock given.
"""

from __future__ import annotations

from coordinator.manager import Coordinator, CoordinatorConfig
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi


class CountingCoordinator(Coordinator):
    """The coordinator's change handlers, with the passes and the every-GPUDriver asks they
    make counted."""

    passes_asked = 0
    reconciles_asked = 0

    def _rollout_changed(self) -> None:
        self.passes_asked += 1

    def _enqueue_all(self, within: float = 0.0) -> None:
        self.reconciles_asked += 1


def counting_coordinator(clock: ManualClock | None = None) -> CountingCoordinator:
    clock = clock or ManualClock()
    config = CoordinatorConfig(namespace="ns", identity="me", lease_duration=15.0)
    return CountingCoordinator(MemoryApi(), config, wall_clock=clock.wall, monotonic=clock)
