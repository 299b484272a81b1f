"""bench.rollout_pass runs its passes on both sides and reports what the memo kept: a fleet
node moves one step per pass at a new resourceVersion, and the two sides' decisions agree."""

from __future__ import annotations

import pytest

from bench.rollout_pass import STEPS, fleet, main
from gpuctl.common import names


def test_a_watch_event_moves_one_node_one_step_at_a_new_resource_version() -> None:
    world = fleet(20)
    before = [dict(n["metadata"]) for n in world.nodes]
    world.step()
    changed = [i for i, n in enumerate(world.nodes) if n["metadata"] != before[i]]
    assert len(changed) == 1
    moved = world.nodes[changed[0]]["metadata"]
    was = before[changed[0]]["labels"][names.STATE_LABEL]
    assert moved["labels"][names.STATE_LABEL] == STEPS[STEPS.index(was) + 1]
    assert int(moved["resourceVersion"]) > int(before[changed[0]]["resourceVersion"])


def test_the_bench_prints_both_sides_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--nodes", "40", "--passes", "4"])
    out = capsys.readouterr().out
    assert "40 nodes, 4 passes" in out
    assert "facts built afresh: median" in out
    assert "ratio facts kept / facts built afresh (median)" in out
    kept = out.split("(")[1].split("%")[0]
    assert float(kept) > 50  # all but the node that moved between passes
