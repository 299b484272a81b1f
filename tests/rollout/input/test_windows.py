"""Maintenance windows (pure): open or closed at a moment, when they close and next open,
across Europe/Berlin's daylight saving changes of 2026 (29 March: 02:00 CET -> 03:00 CEST;
25 October: 03:00 CEST -> 02:00 CET), and the settings that refuse a bad window."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.settings import RolloutSettings, SettingsError, rollout_settings
from gpuctl.rollout.input.windows import Window, window_state
from tests.support.rollout_samples import TARGET, loaded_labels, node, rollout

BERLIN = ZoneInfo("Europe/Berlin")


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def window(days: str, start: str, hours: float, zone: str = "Europe/Berlin") -> Window:
    spec = {"days": days.split(","), "start": start, "duration": f"{hours:g}h", "timeZone": zone}
    [parsed] = rollout_settings({"rollout": {"maintenanceWindows": [spec]}}).maintenance_windows
    return parsed


def test_a_winter_window_opens_at_local_time_and_closes_after_its_duration() -> None:
    saturday_night = window("Sat", "22:00", 4)  # CET = UTC+1
    assert window_state([saturday_night], utc(2026, 1, 10, 20, 59)).opens_at == utc(
        2026, 1, 10, 21, 0
    )
    inside = window_state([saturday_night], utc(2026, 1, 11, 0, 30))  # Sunday 01:30 local
    assert inside.open
    assert inside.closes_at == utc(2026, 1, 11, 1, 0)
    after = window_state([saturday_night], utc(2026, 1, 11, 1, 0))
    assert not after.open
    assert after.opens_at == utc(2026, 1, 17, 21, 0)  # next Saturday


def test_spring_forward_a_start_in_the_skipped_hour_opens_an_hour_later_by_the_new_clock() -> None:
    night = window("Sun", "02:30", 2)  # 02:30 does not exist on 29 March 2026 in Berlin
    state = window_state([night], utc(2026, 3, 29, 0, 0))
    assert state.opens_at == utc(2026, 3, 29, 1, 30)  # = 03:30 CEST
    assert state.opens_at.astimezone(BERLIN).strftime("%H:%M %Z") == "03:30 CEST"
    inside = window_state([night], utc(2026, 3, 29, 2, 0))
    assert inside.closes_at == utc(2026, 3, 29, 3, 30)  # two hours of elapsed time
    # A week later, summer time: 02:30 CEST is 00:30 UTC.
    assert window_state([night], utc(2026, 3, 29, 4, 0)).opens_at == utc(2026, 4, 5, 0, 30)


def test_spring_forward_a_window_spanning_the_change_lasts_its_elapsed_duration() -> None:
    night = window("Sun", "01:00", 3)  # 01:00 CET = 00:00 UTC; 3h later is 04:00 CEST
    state = window_state([night], utc(2026, 3, 29, 2, 59))
    assert state.open
    assert state.closes_at == utc(2026, 3, 29, 3, 0)
    assert state.closes_at.astimezone(BERLIN).strftime("%H:%M %Z") == "05:00 CEST"


def test_fall_back_a_start_in_the_repeated_hour_opens_at_its_first_occurrence() -> None:
    night = window("Sun", "02:30", 2)  # 02:30 happens twice on 25 October 2026
    state = window_state([night], utc(2026, 10, 24, 23, 0))
    assert state.opens_at == utc(2026, 10, 25, 0, 30)  # 02:30 CEST
    inside = window_state([night], utc(2026, 10, 25, 1, 45))  # 02:45 CET, the second time
    assert inside.open
    assert inside.closes_at == utc(2026, 10, 25, 2, 30)
    assert inside.closes_at.astimezone(BERLIN).strftime("%H:%M %Z") == "03:30 CET"
    # The week after, winter time: 02:30 CET is 01:30 UTC.
    assert window_state([night], utc(2026, 10, 25, 3, 0)).opens_at == utc(2026, 11, 1, 1, 30)


def test_several_windows_and_days_the_nearest_opening_and_the_latest_close() -> None:
    weeknights = window("Mon,Tue,Wed,Thu,Fri", "23:00", 1, "UTC")
    weekend = window("Sat,Sun", "00:00", 24, "UTC")
    friday_late = utc(2026, 11, 27, 23, 30)
    state = window_state([weeknights, weekend], friday_late)
    assert (state.open, state.closes_at) == (True, utc(2026, 11, 28, 0, 0))
    saturday = window_state([weeknights, weekend], utc(2026, 11, 28, 12, 0))
    assert saturday.closes_at == utc(2026, 11, 29, 0, 0)
    monday = window_state([weeknights, weekend], utc(2026, 11, 30, 12, 0))
    assert (monday.open, monday.opens_at) == (False, utc(2026, 11, 30, 23, 0))
    # An offset zone far from UTC: Pacific/Kiritimati is UTC+14.
    kiritimati = window("Mon", "08:00", 1, "Pacific/Kiritimati")
    assert window_state([kiritimati], utc(2026, 11, 29, 0, 0)).opens_at == utc(2026, 11, 29, 18, 0)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (
            {"days": ["Sat"], "start": "22:00", "duration": "4h", "timeZone": "Mars/Olympus"},
            "maintenanceWindows[0].timeZone: 'Mars/Olympus' is not a time zone",
        ),
        (
            {"days": ["Sat"], "start": "22:00", "duration": "169h"},
            "maintenanceWindows[0].duration: 169h is not within 1s..168h",
        ),
        ({"days": ["Sat"], "start": "24:00", "duration": "1h"}, "maintenanceWindows.0.start"),
        ({"days": ["Someday"], "start": "22:00", "duration": "1h"}, "maintenanceWindows.0.days"),
        ({"days": [], "start": "22:00", "duration": "1h"}, "maintenanceWindows.0.days"),
    ],
)
def test_a_window_that_cannot_be_used_is_refused_with_the_field_named(
    entry: dict[str, object], words: str
) -> None:
    with pytest.raises(SettingsError, match=words.replace("[", r"\[").replace(".", r"\.")):
        rollout_settings({"rollout": {"maintenanceWindows": [entry]}})


# -- the decision -------------------------------------------------------------------------


def decide_at(now: datetime, nodes: list[Any]) -> Decision:
    settings = dataclasses.replace(
        RolloutSettings(hold_after_first_node=False),
        maintenance_windows=(window("Sat", "22:00", 4),),
    )
    return decide(rollout(nodes, settings=settings, now=now))


def test_outside_every_window_no_node_starts_a_node_in_a_step_goes_on_and_status_says_when() -> (
    None
):
    loading = node("a", phase=Phase.LOADING, version=TARGET, labels=loaded_labels(TARGET))
    waiting = node("b", phase=Phase.PENDING, version=TARGET)
    saturday_noon = utc(2026, 11, 28, 12, 0)  # opens at 22:00 CET = 21:00 UTC
    decision = decide_at(saturday_noon, [loading, waiting])
    moves = {a.node: a.phase_to for a in decision.actions if isinstance(a, PatchNode)}
    assert moves == {"a": Phase.VERIFYING}  # KMM loaded it: it goes on to verification
    assert decision.status is not None
    assert decision.status["maintenanceWindow"] == {
        "open": False,
        "nextOpensAt": "2026-11-28T21:00:00Z",
    }
    assert decision.status["message"] == (
        "outside the maintenance windows: no new node starts (nodes in a step finish it); "
        "the next opens at 2026-11-28T21:00:00Z"
    )
    assert decision.requeue_after is not None
    assert decision.requeue_after <= 9 * 3600


def test_inside_a_window_nodes_start_and_a_pass_is_due_when_it_closes() -> None:
    waiting = node("b", phase=Phase.PENDING, version=TARGET)
    saturday_late = utc(2026, 11, 28, 23, 0)
    decision = decide_at(saturday_late, [waiting])
    moves = {a.node: a.phase_to for a in decision.actions if isinstance(a, PatchNode)}
    assert moves == {"b": Phase.CHECKING}
    assert decision.status is not None
    assert decision.status["maintenanceWindow"] == {
        "open": True,
        "closesAt": "2026-11-29T01:00:00Z",
    }
