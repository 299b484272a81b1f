"""Prometheus metrics of the rollout, in a registry passed in (never the global one).

- `gpuctl_rollout_nodes{gpudriver,phase}`: nodes per phase, every phase present;
- `gpuctl_rollout_step_seconds{phase}`: how long nodes spent in each step (a histogram,
  observed when a node leaves the step);
- `gpuctl_rollout_blocked_nodes{gpudriver,reason}`: Blocked nodes by the kind of their reason
  (gpuctl.rollout.holds.BlockKind, as the node records it), never by its words.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, Gauge, Histogram

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.holds import BlockKind
from gpuctl.rollout.node_step import seconds_since

STEP_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class RolloutMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.nodes = Gauge(
            "gpuctl_rollout_nodes",
            "Targeted nodes per rollout phase.",
            ["gpudriver", "phase"],
            registry=registry,
        )
        self.step_seconds = Histogram(
            "gpuctl_rollout_step_seconds",
            "Seconds a node spent in a rollout step, observed when it leaves the step.",
            ["phase"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.blocked = Gauge(
            "gpuctl_rollout_blocked_nodes",
            "Blocked nodes by kind of reason.",
            ["gpudriver", "reason"],
            registry=registry,
        )
        self._blocked_seen: dict[str, set[str]] = {}

    def transition(self, patch: PatchNode, since: str, now: datetime) -> None:
        """A written phase change: how long the node spent in the phase it left."""
        if patch.phase_from is None or patch.phase_to is None or patch.phase_from == patch.phase_to:
            return
        self.step_seconds.labels(patch.phase_from.value).observe(seconds_since(since, now))

    def phases(self, driver: str, counts: Mapping[str, int], blocked: list[BlockKind]) -> None:
        for phase in Phase:
            self.nodes.labels(driver, phase.value).set(counts.get(phase.value, 0))
        kinds: dict[str, int] = {}
        for kind in blocked:
            kinds[kind.value] = kinds.get(kind.value, 0) + 1
        for gone in self._blocked_seen.get(driver, set()) - set(kinds):
            self.blocked.labels(driver, gone).set(0)
        for label, count in kinds.items():
            self.blocked.labels(driver, label).set(count)
        self._blocked_seen[driver] = set(kinds) | self._blocked_seen.get(driver, set())
