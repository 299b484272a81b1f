"""Recording the revisions a GPUDriver rolled out into `status.revisions` (pure).

A version that becomes the target is a new revision (the highest number plus one), like a
Deployment's new ReplicaSet; a version recorded before that becomes the target again (an
undo, a rollback) moves to the new number, keeping what it recorded. While a revision is the
target, `nodes` counts the most nodes that were Done at it, and `completedAt` is set once its
rollout is Complete. The pass that records a new target also counts the nodes still Done at
the revision it replaces: none has moved yet, and the status written while that revision was
the target may not have caught up with its last nodes. At most
gpuctl.gpudriver.revisions.MAX_REVISIONS entries are kept.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.gpudriver import revisions as rev


def recorded(
    history: Sequence[Mapping[str, Any]] | None,
    *,
    version: str,
    kernel_module: Mapping[str, Any],
    updated: int,
    complete: bool,
    started: str,
    now: str,
    done_at: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The history once the rollout of `version` (at `updated` nodes, started at `started`)
    is recorded at `now`; `done_at` counts the nodes Done at each version this pass."""
    entries = rev.ordered(history)
    newest = entries[-1] if entries else None
    if newest is None or newest.get(rev.VERSION) != version:
        if newest is not None:
            replaced = (done_at or {}).get(str(newest.get(rev.VERSION)), 0)
            newest[rev.NODES] = max(int(newest.get(rev.NODES) or 0), replaced)
        earlier = [e for e in entries if e.get(rev.VERSION) == version]
        entries = [e for e in entries if e.get(rev.VERSION) != version]
        number = (int(newest[rev.REVISION]) + 1) if newest is not None else 1
        entry = earlier[-1] if earlier else {}
        entry.pop(rev.COMPLETED_AT, None)
        kept = entry.get(rev.KERNEL_MODULE) or copy.deepcopy(dict(kernel_module))
        entry.update(
            {
                rev.REVISION: number,
                rev.VERSION: version,
                rev.CONFIG_DIGEST: rev.config_digest(version),
                rev.IMAGES: rev.images(kept),
                rev.KERNEL_MODULE: kept,
                rev.ROLLED_OUT_AT: started,
                rev.NODES: 0,
            }
        )
        entries.append(entry)
        newest = entry
    newest[rev.NODES] = max(int(newest.get(rev.NODES) or 0), updated)
    if complete and not newest.get(rev.COMPLETED_AT):
        newest[rev.COMPLETED_AT] = now
    return entries[-rev.MAX_REVISIONS :]
