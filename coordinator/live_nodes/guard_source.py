"""The agents' reports as the unload guard's second blocker source.

`report_blockers` is pure: for each targeted node, every blocker its fresh report lists, or
one blocker saying the node's state is unknown (no report, a stale one, or one the agent has
since superseded). A MODULE_HOLDERS blocker whose holders are all modules the unload removes
first (`unloaded_with`: KMM unloads modulesLoadingOrder in reverse) is left out. Blockers
are otherwise the agent's own words. `LiveReportSource` feeds it the registry's records and
the clock each time the guard asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from coordinator.drivers.guard import Blocker
from coordinator.live_nodes.freshness import is_fresh, staleness
from coordinator.live_nodes.registry import NodeRecord, Registry
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common.module_holders import holders_unloaded_with

SOURCE = "agents"
REASON_UNKNOWN = "NodeStateUnknown"


def _reason_name(reason: int) -> str:
    try:
        return report_pb.Blocker.Reason.Name(reason)  # type: ignore[arg-type]
    except ValueError:
        return f"REASON_{reason}"


def _holders_unloaded_first(report: report_pb.NodeReport, unloaded_with: Sequence[str]) -> bool:
    """True when the module has holders and the unload removes every one of them first."""
    holders = report.module.holders
    return bool(holders) and not holders_unloaded_with(holders, unloaded_with)


def report_blockers(
    records: Mapping[str, NodeRecord],
    nodes: frozenset[str],
    now: float,
    bound_seconds: float,
    unloaded_with: Sequence[str] = (),
) -> list[Blocker]:
    """Every blocker of each targeted node's fresh report, or why its state is unknown."""
    found: list[Blocker] = []
    for node in sorted(nodes):
        record = records.get(node)
        if not is_fresh(record, now, bound_seconds) or record is None or record.report is None:
            why = staleness(record, now, bound_seconds)
            found.append(
                Blocker(node, REASON_UNKNOWN, f"node {node}: {why} (unknown is never safe)", SOURCE)
            )
            continue
        holders_gone = _holders_unloaded_first(record.report, unloaded_with)
        for blocker in record.report.blockers:
            if holders_gone and blocker.reason == report_pb.Blocker.MODULE_HOLDERS:
                continue
            reason = _reason_name(blocker.reason)
            text = blocker.message or reason
            found.append(Blocker(node, reason, f"node {node}: {text} ({reason})", SOURCE))
    return found


class LiveReportSource:
    """A BlockerSource over the registry's current records."""

    def __init__(
        self, registry: Registry, bound_seconds: float, monotonic: Callable[[], float]
    ) -> None:
        self._registry = registry
        self._bound = bound_seconds
        self._monotonic = monotonic

    def blockers(self, nodes: frozenset[str], unloaded_with: Sequence[str] = ()) -> list[Blocker]:
        records = {r.node: r for r in self._registry.records() if r.node in nodes}
        return report_blockers(records, nodes, self._monotonic(), self._bound, unloaded_with)
