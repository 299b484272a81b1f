"""coordinator/rollout/status_writes.py: a pass writes the rollout status only when it differs
from the last one written while the watch cache lags that write, and from the cache once the
cache has it (or after the settle time); a failed write is forgotten."""

from __future__ import annotations

from typing import Any

from coordinator.rollout.status_writes import (
    PROGRESS_SPACING_SECONDS,
    SETTLE_SECONDS,
    StatusWrites,
)
from tests.support.clock import ManualClock

RUNNING = {"state": "Progressing", "progress": "1/3"}
FURTHER = {"state": "Progressing", "progress": "2/3"}
HELD = {"state": "Paused", "progress": "1/3", "holdKind": "OutsideWindows"}


def cached(resource_version: str, rollout: dict[str, Any] | None) -> dict[str, Any]:
    """The GPUDriver as the watch cache has it."""
    driver: dict[str, Any] = {"metadata": {"name": "gpu", "resourceVersion": resource_version}}
    if rollout is not None:
        driver["status"] = {"rollout": rollout}
    return driver


def test_without_a_write_the_cache_decides() -> None:
    writes = StatusWrites(ManualClock())
    assert writes.due(cached("4", None), RUNNING) == {"rollout": RUNNING}
    assert writes.due(cached("4", RUNNING), RUNNING) == {}
    assert writes.due(cached("4", None), None) == {}  # nothing to write, nothing there
    assert writes.due(cached("4", RUNNING), None) == {"rollout": None}  # cleared


def test_revisions_the_pass_found_to_record_are_written_unless_just_written() -> None:
    writes = StatusWrites(ManualClock())
    history = [{"version": "a"}, {"version": "b"}]
    assert writes.due(cached("4", RUNNING), RUNNING, history) == {"revisions": history}
    writes.wrote("gpu", {"revisions": history}, "5")
    assert writes.due(cached("4", RUNNING), RUNNING, history) == {}
    longer = [*history, {"version": "c"}]
    assert writes.due(cached("4", RUNNING), RUNNING, longer) == {"revisions": longer}


def test_while_the_cache_lags_the_write_the_same_status_is_not_written_again() -> None:
    writes = StatusWrites(ManualClock())
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    stale = cached("4", None)
    assert not writes.due(stale, RUNNING)
    assert writes.due(stale, HELD)  # a new state is written at once
    writes.wrote("gpu", {"revisions": [{"version": "b"}]}, "6")  # a later write of the other
    assert not writes.due(stale, RUNNING)  # field: what was written of both is remembered


def test_once_the_cache_has_the_write_it_decides_again() -> None:
    writes = StatusWrites(ManualClock())
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    assert not writes.due(cached("5", RUNNING), RUNNING)
    # Someone else rewrote it afterwards: the cache shows theirs, ours is written back.
    assert writes.due(cached("6", {"state": "edited"}), RUNNING)


def test_after_the_settle_time_the_cache_decides_even_if_it_skipped_the_write() -> None:
    clock = ManualClock()
    writes = StatusWrites(clock)
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    other = cached("7", {"state": "edited"})  # the cache went past "5" to a later write
    assert not writes.due(other, RUNNING)
    clock.advance(SETTLE_SECONDS)
    assert writes.due(other, RUNNING)


def test_a_failed_write_is_written_again() -> None:
    writes = StatusWrites(ManualClock())
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    writes.wrote("gpu", {"rollout": RUNNING}, None)
    assert writes.due(cached("4", None), RUNNING)


def test_a_forgotten_gpudriver_is_read_from_the_cache() -> None:
    writes = StatusWrites(ManualClock())
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    writes.forget("gpu")
    assert writes.due(cached("4", None), RUNNING)


def test_a_hold_that_ended_is_removed_by_the_write_and_the_status_then_settles() -> None:
    # The merge patch names the ended hold with null; a cache that then shows the status as
    # decided owes no further write (before, the hold stayed and every pass wrote again).
    writes = StatusWrites(ManualClock())
    held = {**RUNNING, "holdKind": "ModuleNotReady"}
    driver = cached("4", held)
    fields = writes.due(driver, RUNNING)
    assert writes.patch(driver, fields) == {"rollout": {**RUNNING, "holdKind": None}}
    writes.wrote("gpu", fields, "5")
    assert writes.due(cached("5", RUNNING), RUNNING) == {}


def test_a_key_only_the_last_write_shows_is_removed_too() -> None:
    # The cache lags a write that held the rollout; the next status, without a hold, nulls it.
    writes = StatusWrites(ManualClock())
    writes.wrote("gpu", {"rollout": {**RUNNING, "holdKind": "Window"}}, "5")
    stale = cached("4", RUNNING)
    fields = writes.due(stale, FURTHER)
    assert writes.patch(stale, fields) == {"rollout": {**FURTHER, "holdKind": None}}
    assert writes.patch(stale, {"revisions": []}) == {"revisions": []}


def test_progress_is_written_at_most_once_per_spacing_and_a_pass_asked_for_when_due() -> None:
    """Each node's step changes the counts and the listed nodes: written at most once per
    PROGRESS_SPACING_SECONDS, the pass that holds it back told when it is due."""
    clock = ManualClock()
    writes = StatusWrites(clock)
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    settled = cached("5", RUNNING)
    assert writes.due(settled, FURTHER) == {}
    assert writes.held_for("gpu") == PROGRESS_SPACING_SECONDS
    clock.advance(PROGRESS_SPACING_SECONDS / 2)
    assert writes.due(settled, FURTHER) == {}
    assert writes.held_for("gpu") == PROGRESS_SPACING_SECONDS / 2
    clock.advance(PROGRESS_SPACING_SECONDS / 2)
    assert writes.due(settled, FURTHER) == {"rollout": FURTHER}
    assert writes.held_for("gpu") is None


def test_a_change_beyond_progress_is_written_at_once_and_nothing_stays_held() -> None:
    clock = ManualClock()
    writes = StatusWrites(clock)
    writes.wrote("gpu", {"rollout": RUNNING}, "5")
    settled = cached("5", RUNNING)
    assert writes.due(settled, FURTHER) == {}
    assert writes.due(settled, HELD) == {"rollout": HELD}  # a hold: at once
    assert writes.held_for("gpu") is None
    history = [{"version": "a"}]
    assert writes.due(settled, FURTHER, history) == {"rollout": FURTHER, "revisions": history}
    assert writes.due(settled, None) == {"rollout": None}  # the rollout's status cleared


def test_the_first_status_is_written_at_once() -> None:
    writes = StatusWrites(ManualClock())
    assert writes.due(cached("4", None), RUNNING) == {"rollout": RUNNING}
    writes.wrote("other", {"rollout": RUNNING}, "9")  # another GPUDriver's write holds nothing
    assert writes.due(cached("4", RUNNING), FURTHER) == {"rollout": FURTHER}
