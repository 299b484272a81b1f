"""The order in which a rollout starts nodes: one rule for the coordinator and the CLI.

The coordinator starts nodes only while the unavailable ones stay within maxUnavailable. A
node that is unavailable already (cordoned by anyone, say by an admin; or waiting with a GPU
that serves nothing, gpuctl/rollout/input/driverless.py) starts without taking another slot,
so it goes first; the others go by name. The coordinator's decision
(gpuctl/rollout/decide.py) starts nodes in this order and `gpuctl rollout plan` lists
them in it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuctl.common.names import IN_PROGRESS, Phase


def is_unavailable(
    phase: Phase | None, *, unschedulable: bool, ready: bool, driverless: bool = False
) -> bool:
    """The node counts against maxUnavailable: in a step, cordoned by anyone, NotReady, or
    waiting (Pending or Blocked) with a GPU its agent reports without a driver (`driverless`).

    A Skipped node never counts. `phase` is the node's phase in this rollout (None: none yet).
    """
    if phase is Phase.SKIPPED:
        return False
    waiting_driverless = driverless and phase in (None, Phase.PENDING, Phase.BLOCKED)
    return phase in IN_PROGRESS or unschedulable or not ready or waiting_driverless


def start_order(already_unavailable: Mapping[str, bool]) -> list[str]:
    """Node names (each mapped to whether it is unavailable already) in the order the rollout
    starts them: the unavailable ones first, then the rest; by name within each."""
    return sorted(already_unavailable, key=lambda name: (not already_unavailable[name], name))
