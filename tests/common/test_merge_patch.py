"""gpuctl/common/merge_patch.py: the three merge-patch shapes, checked by applying them."""

from __future__ import annotations

from typing import Any

from gpuctl.common.merge_patch import apply_merge_patch, merge_patch_to, overwrite_patch

OLD: dict[str, Any] = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": True}
NEW: dict[str, Any] = {"a": 2, "b": {"c": [1]}, "f": {"g": 1}}


def test_merge_patch_to_turns_current_into_wanted_and_names_only_changes() -> None:
    patch = merge_patch_to(OLD, NEW)
    assert apply_merge_patch(OLD, patch) == NEW
    assert patch == {"a": 2, "b": {"c": [1], "d": None}, "e": None, "f": {"g": 1}}
    assert merge_patch_to(OLD, OLD) == {}


def test_overwrite_patch_leaves_wanted_whichever_seen_version_the_server_holds() -> None:
    # The cache shows a hold; the coordinator's own last write (not yet in the cache) had
    # another key; the server holds either. The status now wanted has neither.
    cached = {"state": "Held", "holdKind": "ModuleNotReady", "counts": {"Pending": 2}}
    written = {"state": "Held", "waitKind": "Window", "counts": {"Pending": 1, "Done": 1}}
    wanted = {"state": "Progressing", "counts": {"Pending": 1}}
    patch = overwrite_patch([cached, written], wanted)
    for held in (cached, written):
        assert apply_merge_patch(held, patch) == wanted
    assert patch["holdKind"] is None
    assert patch["waitKind"] is None


def test_overwrite_patch_writes_every_key_even_one_the_cache_shows_unchanged() -> None:
    # A cache that shows the wanted value may lag a server that holds another one.
    assert overwrite_patch([{"a": 1}], {"a": 1}) == {"a": 1}
    assert overwrite_patch([None, "scalar"], {"a": {"b": 1}}) == {"a": {"b": 1}}
    assert overwrite_patch([{"a": 1}], None) is None  # the whole value removed
