"""Which nodes' agents report: connected, with a report the coordinator still counts as fresh.

`gpuctl nodes --require-reporting N` (and the chart's `helm test`, which runs it against the
coordinator) fails unless at least N nodes do, naming the ones that do not and why. Pure: views
in, words out.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuctl.cli.node_view import NodeView

# Named in the refusal; the rest are counted.
NAMED_NODES = 5


def is_reporting(view: NodeView) -> bool:
    """The node's agent is connected and its report is there and fresh (unknown is not)."""
    has_report = view.report is not None and not view.problem
    return view.connected is True and has_report and not view.stale


def why_not_reporting(view: NodeView) -> str:
    """In words, why `view` does not count as reporting."""
    if view.connected is None:
        return "no agent has connected"
    if view.connected is False:
        return "agent disconnected"
    if view.problem:
        return view.problem
    if view.report is None:
        return "no report yet"
    return "report stale"


def reporting_shortfall(views: Sequence[NodeView], minimum: int) -> str:
    """Why fewer than `minimum` nodes report ("" when at least that many do)."""
    reporting = [view for view in views if is_reporting(view)]
    if len(reporting) >= minimum:
        return ""
    silent = [view for view in views if not is_reporting(view)]
    named = "; ".join(f"{v.name}: {why_not_reporting(v)}" for v in silent[:NAMED_NODES])
    more = f"; and {len(silent) - NAMED_NODES} more" if len(silent) > NAMED_NODES else ""
    detail = f" ({named}{more})" if named else ""
    return (
        f"{len(reporting)} of {len(views)} GPU node(s) have an agent reporting, at least "
        f"{minimum} required{detail}"
    )
