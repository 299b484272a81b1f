"""JSON merge patches (RFC 7386): the one home of how gpuctl writes part of an object.

A merge patch changes only the keys it names, and a key is removed only by naming it with
null. So a writer that sends what it wants, and not the nulls for what it no longer wants,
leaves stale keys behind for ever (a rollout hold that ended, a blocker list that emptied).
Three shapes, each for one kind of writer:

- `merge_patch_to(current, wanted)`: the smallest patch from a known `current` (objects
  patched key by key; unchanged keys left out);
- `overwrite_patch(seen, wanted)`: every key of `wanted`, and null for each key any of the
  `seen` versions has and `wanted` lacks, for a writer that cannot be sure which version
  the server holds (a watch cache that lags its own last write);
- `apply_merge_patch(current, patch)`: what the server makes of a patch.

Pure: plain JSON values in and out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def merge_patch_to(current: Any, wanted: Any) -> Any:
    """The merge patch that turns `current` into `wanted`: keys `wanted` lacks are nulled,
    objects are patched key by key, anything else is replaced."""
    if not isinstance(current, Mapping) or not isinstance(wanted, Mapping):
        return wanted
    patch: dict[str, Any] = {key: None for key in current if key not in wanted}
    for key, value in wanted.items():
        if key not in current:
            patch[key] = value
        elif current[key] != value:
            patch[key] = merge_patch_to(current[key], value)
    return patch


def overwrite_patch(seen: Sequence[Any], wanted: Any) -> Any:
    """The merge patch that leaves exactly `wanted` whichever of the `seen` versions the
    target holds: every key of `wanted` (objects likewise, key by key), and null for each key
    some object of `seen` has that `wanted` lacks."""
    if not isinstance(wanted, Mapping):
        return wanted
    objects = [version for version in seen if isinstance(version, Mapping)]
    patch: dict[str, Any] = {key: None for version in objects for key in version}
    for key, value in wanted.items():
        patch[key] = overwrite_patch([version.get(key) for version in objects], value)
    return patch


def apply_merge_patch(current: Any, patch: Any) -> Any:
    """`current` after the merge patch `patch`."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(current) if isinstance(current, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result
