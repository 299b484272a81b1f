"""bench.rollout_pass runs its passes on both sides and reports what the memos kept: a fleet
node moves one step per pass at a new resourceVersion, and the two sides' decisions agree."""

from __future__ import annotations

import pytest

from bench.rollout_pass import STEPS, fleet, main, one_pass, pods_on
from gpuctl.common import names
from gpuctl.rollout.actions import EvictPods


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


def test_no_node_is_idle_and_the_passes_drain_the_busy_ones() -> None:
    """Every node runs a GPU daemon, the undrained ones the workload's GPU pod too, so the
    passes the bench times go through the drain (evictions), not past idle nodes."""
    world = fleet(100)  # ten nodes in steps, every step among them
    assert all(pods_on(node) for node in world.nodes)
    one_pass(world, None, None)
    assert any(isinstance(action, EvictPods) for action in world.decisions[-1].actions)


def test_the_bench_prints_both_sides_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--nodes", "40", "--passes", "4"])
    out = capsys.readouterr().out
    assert "40 nodes, 4 passes" in out
    assert "built afresh: median" in out
    assert "ratio kept / built afresh (median)" in out
    # All but the node that moved between passes, of the facts and of the wanted answers.
    facts, wanted = out.split(" of nodes' facts kept, ")
    assert float(facts.split("(")[1].split("%")[0]) > 50
    assert float(wanted.split("%")[0]) > 50
