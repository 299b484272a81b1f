"""Prometheus metrics of the rollout, in a registry passed in (never the global one).

Per GPUDriver:
- `gpuctl_rollout_nodes{gpudriver,phase}`: nodes per phase, every phase present;
- `gpuctl_rollout_blocked_nodes{gpudriver,reason}`: Blocked nodes by the kind of their reason
  (gpuctl.rollout.reasons.BlockKind, as the node records it), never by its words;
- `gpuctl_rollout_state{gpudriver,state}`: 1 for status.rollout.state, 0 for the others;
- `gpuctl_rollout_hold{gpudriver,kind}`: 1 for status.rollout.holdKind (what keeps nodes from
  starting: RolledBack, OutsideWindows, ...), 0 for the others;
- `gpuctl_rollout_target_info{gpudriver,version}`: 1, labelled with the version rolled to.
Per node in a rollout (removed when it leaves, or its phase or version changes):
- `gpuctl_node_rollout_phase{gpudriver,node,phase}`: 1 for the node's phase;
- `gpuctl_node_driver_version_info{gpudriver,node,version}`: 1, the version KMM is asked for
  there (the removal path's marker while the driver is taken off).
And `gpuctl_rollout_step_seconds{phase}`: how long nodes spent in each step (a histogram,
observed when a node leaves the step); `gpuctl_rollout_pass_seconds`: how long each pass took
(gather, decide, act; its count is how often the rollout looked again).

Series of a GPUDriver that is gone are removed (`forget`): an alert on a Failed node of a
deleted GPUDriver would otherwise fire for ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.reasons import BlockKind, HoldKind, RolloutState
from gpuctl.rollout.step.writes import seconds_since

STEP_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class _DriverSeries:
    """The label values written for one GPUDriver, to remove what no longer holds."""

    blocked: set[str] = field(default_factory=set)
    target: str | None = None
    nodes: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (phase, version)
    states: bool = False


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
        self.pass_seconds = Histogram(
            "gpuctl_rollout_pass_seconds",
            "Seconds one rollout pass over a GPUDriver's nodes took (gather, decide, act).",
            buckets=PASS_BUCKETS,
            registry=registry,
        )
        self.blocked = Gauge(
            "gpuctl_rollout_blocked_nodes",
            "Blocked nodes by kind of reason.",
            ["gpudriver", "reason"],
            registry=registry,
        )
        self.state = Gauge(
            "gpuctl_rollout_state",
            "1 for the rollout's state (status.rollout.state), 0 for the others.",
            ["gpudriver", "state"],
            registry=registry,
        )
        self.hold = Gauge(
            "gpuctl_rollout_hold",
            "1 for what holds the rollout (status.rollout.holdKind), 0 for the others.",
            ["gpudriver", "kind"],
            registry=registry,
        )
        self.target = Gauge(
            "gpuctl_rollout_target_info",
            "The version a GPUDriver rolls to, as a label.",
            ["gpudriver", "version"],
            registry=registry,
        )
        self.node_phase = Gauge(
            "gpuctl_node_rollout_phase",
            "1 for a node's rollout phase.",
            ["gpudriver", "node", "phase"],
            registry=registry,
        )
        self.node_version = Gauge(
            "gpuctl_node_driver_version_info",
            "The driver version KMM is asked for on a node, as a label.",
            ["gpudriver", "node", "version"],
            registry=registry,
        )
        self._written: dict[str, _DriverSeries] = {}

    def transition(self, patch: PatchNode, since: str, now: datetime) -> None:
        """A written phase change: how long the node spent in the phase it left."""
        if patch.phase_from is None or patch.phase_to is None or patch.phase_from == patch.phase_to:
            return
        self.step_seconds.labels(patch.phase_from.value).observe(seconds_since(since, now))

    def record(
        self,
        driver: str,
        status: Mapping[str, Any] | None,
        node_phases: Mapping[str, Phase],
        node_versions: Mapping[str, str],
        blocked: list[BlockKind],
    ) -> None:
        """One pass's outcome: `status` is status.rollout as written (None: nothing rolls)."""
        written = self._written.setdefault(driver, _DriverSeries())
        counts = (status or {}).get("counts") or {}
        for phase in Phase:
            self.nodes.labels(driver, phase.value).set(counts.get(phase.value, 0))
        self._blocked_kinds(driver, written, blocked)
        self._rollout(driver, written, status)
        self._per_node(driver, written, node_phases, node_versions)

    def forget(self, driver: str) -> None:
        """The GPUDriver is gone: remove every series labelled with it."""
        written = self._written.pop(driver, None)
        if written is None:
            return
        for each in Phase:
            self.nodes.remove(driver, each.value)
        for kind in written.blocked:
            self.blocked.remove(driver, kind)
        if written.states:
            for state in RolloutState:
                self.state.remove(driver, state.value)
            for hold in HoldKind:
                self.hold.remove(driver, hold.value)
        if written.target is not None:
            self.target.remove(driver, written.target)
        for node, (phase_name, version) in written.nodes.items():
            self.node_phase.remove(driver, node, phase_name)
            self.node_version.remove(driver, node, version)

    def _blocked_kinds(self, driver: str, written: _DriverSeries, blocked: list[BlockKind]) -> None:
        kinds: dict[str, int] = {}
        for kind in blocked:
            kinds[kind.value] = kinds.get(kind.value, 0) + 1
        for gone in written.blocked - set(kinds):
            self.blocked.labels(driver, gone).set(0)
        for label, count in kinds.items():
            self.blocked.labels(driver, label).set(count)
        written.blocked |= set(kinds)

    def _rollout(
        self, driver: str, written: _DriverSeries, status: Mapping[str, Any] | None
    ) -> None:
        state = str((status or {}).get("state") or "")
        hold = str((status or {}).get("holdKind") or "")
        for each in RolloutState:
            self.state.labels(driver, each.value).set(1 if each.value == state else 0)
        for kind in HoldKind:
            self.hold.labels(driver, kind.value).set(1 if kind.value == hold else 0)
        written.states = True
        target = str((status or {}).get("targetVersion") or "") or None
        if written.target is not None and written.target != target:
            self.target.remove(driver, written.target)
        if target is not None:
            self.target.labels(driver, target).set(1)
        written.target = target

    def _per_node(
        self,
        driver: str,
        written: _DriverSeries,
        node_phases: Mapping[str, Phase],
        node_versions: Mapping[str, str],
    ) -> None:
        now = {
            name: (phase.value, node_versions.get(name, "")) for name, phase in node_phases.items()
        }
        for node, (phase, version) in written.nodes.items():
            new = now.get(node)
            if new is None or new[0] != phase:
                self.node_phase.remove(driver, node, phase)
            if new is None or new[1] != version:
                self.node_version.remove(driver, node, version)
        for node, (phase, version) in now.items():
            before = written.nodes.get(node)
            # A series written before still reads 1: only a new or changed node is written
            # (a pass over 5,000 nodes where one moved: bench/rollout_metrics.py).
            if before is None or before[0] != phase:
                self.node_phase.labels(driver, node, phase).set(1)
            if before is None or before[1] != version:
                self.node_version.labels(driver, node, version).set(1)
        written.nodes = now
