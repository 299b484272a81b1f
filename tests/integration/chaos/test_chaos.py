"""The short chaos run in CI: 20 nodes (busy and idle), two coordinator replicas, one fault of
each kind on a seeded schedule, and no invariant broken (testbed/chaos/run.py says what is
checked). The long run is `python -m bench.chaos`. Coordinator kills at every step of a node,
each node unloaded exactly once, are tests/integration/rollout/test_end_to_end.py's
(`test_a_coordinator_killed_at_random_points_resumes_without_breaking_the_bound`): here a
leader kill is one fault among the control plane's, not proved a second time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.chaos.run import KINDS, ChaosPlan, run_chaos
from testbed.chaos.world import chaos_world
from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane

pytestmark = pytest.mark.integration

PLAN = ChaosPlan(
    counts={
        "kill-leader": 1,
        "kill-all": 1,
        "apiserver-restart": 1,
        "etcd-restart": 1,
        "watch-expired": 1,
        "agent-cut": 1,
        "agent-restart": 1,
        "agent-gone": 1,
        "clock-skew": 1,
    },
    seed=20261130,
)


@pytest.mark.timeout(1200)
def test_a_rollout_under_chaos_breaks_no_invariant(
    own_plane: tuple[ControlPlane, KubeCluster], tmp_path: Path
) -> None:
    plane, cluster = own_plane
    with chaos_world(plane, cluster, tmp_path) as world:
        report = run_chaos(world, PLAN, say=lambda line: print(line, flush=True))
    print(json.dumps(report.table(), indent=1))  # the figures, with -s
    assert {f.kind for f in report.faults} == set(KINDS)
    assert report.breaches == []
    assert report.unloads_while_busy == []
    assert report.unsettled == {}, report.rollout_message
    assert report.relists > 0, "no watch expired: the watch-expired fault did not bite"
    assert report.rounds >= 1
