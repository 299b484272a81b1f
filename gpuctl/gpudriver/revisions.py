"""A GPUDriver's revision history (`status.revisions`) and how to go back to a revision.

The coordinator records one entry per driver revision it rolled out: the Module's KMM version
(`version`, which digests everything KMM puts in a node's config, so `configDigest` is its
hex tail), the images, the `kernelModule` the spec had (enough to restore it), when it
became the target, when it completed and how many nodes ran it. `gpuctl rollout undo` and
the coordinator's `onNodeFailure: Rollback` both go back the way `kubectl rollout undo` does:
they rewrite `spec.kernelModule` from the recorded revision, and the rollout takes every node
there node by node, through the same checks. This module is the one home of the entries'
field names, of which revision "the previous one" is, and of the patch that restores one.

Pure: plain dicts in and out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.common import names
from gpuctl.common.merge_patch import merge_patch_to

# status.revisions keeps at most this many entries (the newest).
MAX_REVISIONS = 10

REVISION = "revision"
VERSION = "version"
CONFIG_DIGEST = "configDigest"
IMAGES = "images"
KERNEL_MODULE = "kernelModule"
ROLLED_OUT_AT = "rolledOutAt"
COMPLETED_AT = "completedAt"
NODES = "nodes"


class RevisionError(ValueError):
    """No such revision, or nothing to go back to; the text says which."""


def ordered(revisions: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The entries that carry a revision number, oldest first."""
    usable = [dict(r) for r in revisions or [] if isinstance(r.get(REVISION), int)]
    return sorted(usable, key=lambda r: int(r[REVISION]))


def of_status(driver: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A GPUDriver object's recorded revisions, oldest first."""
    return ordered((driver.get("status") or {}).get("revisions"))


def config_digest(version: str) -> str:
    """The config digest inside a KMM version (`<version>-<8 hex>` or `cfg-<12 hex>`)."""
    return version.rsplit("-", 1)[-1]


def images(kernel_module: Mapping[str, Any]) -> list[str]:
    """The container images a kernelModule's kernel mappings name, in order, once each."""
    out: list[str] = []
    for mapping in kernel_module.get("kernelMappings") or []:
        image = str((mapping or {}).get("containerImage") or "")
        if image and image not in out:
            out.append(image)
    return out


def numbered(revisions: Sequence[Mapping[str, Any]], number: int) -> dict[str, Any]:
    """The entry with revision `number`; RevisionError naming the ones there are."""
    for entry in ordered(revisions):
        if entry[REVISION] == number:
            return entry
    there = ", ".join(str(r[REVISION]) for r in ordered(revisions)) or "none"
    raise RevisionError(f"no revision {number} in the history (recorded: {there})")


def previous(revisions: Sequence[Mapping[str, Any]], current_version: str) -> dict[str, Any]:
    """The newest revision of another version than `current_version`: where an undo (or a
    rollback) goes without a revision number."""
    for entry in reversed(ordered(revisions)):
        if entry.get(VERSION) != current_version:
            return dict(entry)
    raise RevisionError(
        f"no earlier revision than {current_version} in the history: nothing to go back to"
    )


def restorable(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The kernelModule recorded in `entry`; RevisionError when it holds none."""
    kernel_module = entry.get(KERNEL_MODULE)
    if not isinstance(kernel_module, Mapping) or not kernel_module.get("kernelMappings"):
        raise RevisionError(f"revision {entry.get(REVISION)} records no kernelModule to restore")
    return dict(kernel_module)


def restore_patch(
    driver: Mapping[str, Any], entry: Mapping[str, Any], annotations: Mapping[str, str | None]
) -> dict[str, Any]:
    """The merge patch of a GPUDriver that puts `entry`'s kernelModule back into its spec,
    with `annotations`, made only if the GPUDriver is still at the resourceVersion read."""
    meta = driver.get("metadata") or {}
    current = (driver.get("spec") or {}).get(KERNEL_MODULE) or {}
    return {
        "metadata": {
            "resourceVersion": str(meta.get("resourceVersion", "")),
            "annotations": dict(annotations),
        },
        "spec": {KERNEL_MODULE: merge_patch_to(current, restorable(entry))},
    }


# -- the rollback record on the GPUDriver -------------------------------------------------


def rollback_note(
    *, from_version: str, to_version: str, revision: int, nodes: Sequence[str], reason: str
) -> str:
    """The value of names.ROLLBACK: what the coordinator rolled back, and why."""
    return json.dumps(
        {
            "from": from_version,
            "to": to_version,
            "revision": revision,
            "nodes": sorted(nodes),
            "reason": reason,
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def left_to_git(note: str, owner: str) -> str:
    """A rollback record the coordinator did not carry out because `owner` (a GitOps tool)
    applies the spec: the same record, naming the tool."""
    record = json.loads(note)
    record["gitops"] = owner
    return json.dumps(record, separators=(",", ":"), sort_keys=True)


def read_rollback(driver: Mapping[str, Any]) -> dict[str, Any]:
    """The rollback record of a GPUDriver ({} when none, or when it is not one)."""
    annotations = (driver.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(names.ROLLBACK)
    if not text:
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(record, dict) or not isinstance(record.get("nodes"), list):
        return {}
    return record
