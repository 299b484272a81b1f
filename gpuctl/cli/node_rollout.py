"""Where the rollout has a node, for `gpuctl node inspect NODE`: its phase and why (pure).

The coordinator records each node's rollout on the Node itself: the phase label
(`gpuctl.dev/driver-state`), the GPUDriver it acts for, and for a Blocked or Failed node the
reason and its kind (annotations). An admin inspecting a node sees them above the report:
the reason a node is held ("the node enforces module signatures ...") beside the facts it
comes from, and under a Blocked node its kind's remedy in one line with where the
troubleshooting page says more (gpuctl/rollout/remedies/). A Node that could not be read says
so; a node no rollout has touched prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.common import names
from gpuctl.rollout.reasons import parse_block_kind
from gpuctl.rollout.remedies import remedy_line


def rollout_line(node: Mapping[str, Any] | None, problem: str = "") -> str:
    """The line(s) to print ("" for a node no rollout has touched)."""
    if node is None:
        return f"Rollout: unknown ({problem})\n" if problem else ""
    meta = node.get("metadata") or {}
    phase = (meta.get("labels") or {}).get(names.STATE_LABEL)
    if not phase:
        return ""
    annotations = meta.get("annotations") or {}
    driver = annotations.get(names.GPUDRIVER)
    line = f"Rollout{f' of GPUDriver {driver}' if driver else ''}: {phase}"
    kind = annotations.get(names.REASON_KIND)
    if kind:
        line += f" ({kind})"
    reason = annotations.get(names.REASON)
    line += (f": {reason}" if reason else "") + "\n"
    if phase == names.Phase.BLOCKED.value:
        line += f"  {remedy_line(parse_block_kind(kind))}\n"
    return line
