"""A world run's schedule (testbed/world/plan.py): the seed decides it, the weights shape it,
and a written schedule replays exactly; a schedule file that cannot be replayed says why."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from testbed.world.events import EVENTS
from testbed.world.plan import (
    KINDS,
    ScheduleError,
    WorldPlan,
    read_schedule,
    schedule,
    write_schedule,
)


def test_the_seed_decides_the_schedule() -> None:
    plan = WorldPlan(seed=7, events=50, nodes=20)
    assert schedule(plan) == schedule(plan)
    assert schedule(plan) != schedule(WorldPlan(seed=8, events=50, nodes=20))
    # The first events of a longer run are the shorter run's: a prefix replays a prefix.
    assert schedule(WorldPlan(seed=7, events=80, nodes=20))[:50] == schedule(plan)


def test_every_kind_is_drawn_about_as_often_as_its_weight_says() -> None:
    plan = WorldPlan(seed=1, events=4000, nodes=20)
    drawn = Counter(e.kind for e in schedule(plan))
    total = sum(plan.weights.values())
    for kind in KINDS:
        expected = 4000 * plan.weights[kind] / total
        assert abs(drawn[kind] - expected) < 0.25 * expected + 10, (kind, drawn[kind], expected)
    events = schedule(plan)
    assert {e.node for e in events} == set(range(20))
    assert all(0 <= e.choice < 1 and plan.gap[0] <= e.gap <= plan.gap[1] for e in events)


def test_a_kind_weighed_zero_is_never_drawn_and_an_unknown_one_is_refused() -> None:
    weights = {**WorldPlan(seed=1, events=1).weights, "reboot-busy": 0.0}
    events = schedule(WorldPlan(seed=1, events=500, weights=weights))
    assert "reboot-busy" not in {e.kind for e in events}
    with pytest.raises(ValueError, match="unknown event kinds \\['reboot-sideways'\\]"):
        schedule(WorldPlan(seed=1, events=1, weights={"reboot-sideways": 1.0}))


def test_every_kind_has_its_event() -> None:
    assert set(EVENTS) == set(KINDS)


def test_a_written_schedule_replays_as_it_was(tmp_path: Path) -> None:
    plan = WorldPlan(seed=3, events=30, nodes=6)
    events = schedule(plan)
    file = tmp_path / "world.json"
    write_schedule(plan, events, file)
    assert read_schedule(file) == (plan, events)


def test_a_schedule_that_cannot_be_replayed_says_why(tmp_path: Path) -> None:
    file = tmp_path / "world.json"
    file.write_text("not json")
    with pytest.raises(ScheduleError, match="not a world schedule"):
        read_schedule(file)
    plan = WorldPlan(seed=3, events=2, nodes=6)
    write_schedule(plan, schedule(plan), file)
    body = json.loads(file.read_text())
    body["events"][1]["node"] = 6  # a node the plan does not have
    file.write_text(json.dumps(body))
    with pytest.raises(ScheduleError, match="event 1 cannot be replayed"):
        read_schedule(file)


def test_a_schedule_of_the_new_kinds_replays_with_its_weights(tmp_path: Path) -> None:
    # The node's GPU DaemonSets coming and going and the admin's drain (issue 48), drawn often
    # as a plan raising their weights asks: written and read back, they replay as they were.
    new = ("admin-drain", "daemons-paused", "daemons-undeclared")
    assert set(new) <= set(KINDS)
    weights = {**WorldPlan(seed=1, events=1).weights, **dict.fromkeys(new, 6.0)}
    plan = WorldPlan(seed=31, events=120, nodes=20, weights=weights)
    events = schedule(plan)
    drawn = Counter(e.kind for e in events)
    assert all(drawn[kind] >= 8 for kind in new), drawn
    file = tmp_path / "world.json"
    write_schedule(plan, events, file)
    assert read_schedule(file) == (plan, events)
    assert schedule(read_schedule(file)[0]) == events  # the weights came back too


def test_a_kind_unknown_to_this_code_is_refused_on_replay(tmp_path: Path) -> None:
    plan = WorldPlan(seed=3, events=2, nodes=6)
    file = tmp_path / "world.json"
    write_schedule(plan, schedule(plan), file)
    body = json.loads(file.read_text())
    body["events"][0]["kind"] = "daemons-sideways"
    file.write_text(json.dumps(body))
    with pytest.raises(ScheduleError, match="event 0 cannot be replayed"):
        read_schedule(file)
