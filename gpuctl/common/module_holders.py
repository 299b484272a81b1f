"""Which holders of a module still block its unload when KMM unloads a list of modules.

KMM unloads the modules of `kernelModule.modulesLoadingOrder` in reverse order: with
`[xe, xe_compat]` it removes xe_compat first, then xe. A holder of xe listed after xe is
therefore gone by the time xe is removed and does not block; any other holder still does.
Shared by the agent's prepare planner, the rollout and the unload guard (and the CLI).
"""

from __future__ import annotations

from collections.abc import Sequence


def modules_unloaded_with(modules_loading_order: Sequence[str] | None) -> list[str]:
    """The modules KMM unloads before the first one: modulesLoadingOrder after its first entry."""
    return list(modules_loading_order or [])[1:]


def holders_unloaded_with(holders: Sequence[str], unloaded_with: Sequence[str]) -> list[str]:
    """The holders (in their order) that still block: those not in `unloaded_with`."""
    removed = set(unloaded_with)
    return [holder for holder in holders if holder not in removed]
