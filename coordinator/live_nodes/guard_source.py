"""The agents' reports as the unload guard's second blocker source.

`report_blockers` is pure: for each targeted node, the blockers the shared unload rule
(gpuctl.common.unload_rule) finds in its report, or one blocker saying the node's state is
unknown (no report, a stale one, or one the agent has since superseded: freshness.py says
which). Nothing prepares the node around a Module deletion, so no VF counts as cleared; a
MODULE_HOLDERS blocker always counts (KMM removes the module before the rest of
modulesLoadingOrder, `unloaded_with`, so listing a holder there does not help). Blockers are
the agent's own words. `LiveReportSource` feeds it the registry's records and the
clock each time the guard asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from coordinator.drivers.guard import Blocker
from coordinator.live_nodes.freshness import staleness
from coordinator.live_nodes.node_record import NodeRecord
from coordinator.live_nodes.registry import Registry
from gpuctl.common.unload_rule import UnloadSettings, unload_verdict

SOURCE = "agents"


def report_blockers(
    records: Mapping[str, NodeRecord],
    nodes: frozenset[str],
    now: float,
    bound_seconds: float,
    unloaded_with: Sequence[str] = (),
) -> list[Blocker]:
    """Every blocker of each targeted node's fresh report, or why its state is unknown."""
    settings = UnloadSettings(unloaded_with=tuple(unloaded_with))
    found: list[Blocker] = []
    for node in sorted(nodes):
        record = records.get(node)
        report = record.report if record is not None else None
        verdict = unload_verdict(report, settings, not_fresh=staleness(record, now, bound_seconds))
        for blocker in verdict.blocking:
            words = blocker.message if blocker.unknown else f"{blocker.message} ({blocker.reason})"
            found.append(Blocker(node, blocker.reason, f"node {node}: {words}", SOURCE))
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
