"""The short world run in CI (testbed/world/): a fleet on KMM's own operator under a fixed seed's
real-world events — reboots in any phase (in-tree `xe` busy, idle or blacklisted), host daemons
opening the GPU and letting go, the admin's cordons, drains (`kubectl drain`), skip labels and
`kubectl delete node`, the node's GPU DaemonSets installed and uninstalled (one declared in
rollout.pause, one declared nowhere), KMM slow or restarted, version and parameter changes,
pause and resume, a leader killed, agents restarted — with every
invariant of testbed/world/invariants.py held all along and the rollout converging once the
world is quiet. The long runs are `python -m bench.world` (docs/benchmarks.md).

And the run's own proof: the same schedule, run on to 200 events with the coordinator's reboot
hold switched off (testbed/world/mutant.py), breaks an invariant (a rebooted node left Done or
driver-ready unverified, or KMM's loader at a busy in-tree xe).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from testbed.chaos.world import chaos_world
from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane
from testbed.world.mutant import mutant_command
from testbed.world.plan import KINDS, WorldPlan, schedule
from testbed.world.run import run_world

pytestmark = pytest.mark.integration

# A seed whose 50 events draw every kind at least once (an end of something, drawn before any
# start of it, may find nothing to do); the undeclared GPU DaemonSet comes (event 41) and goes
# (49) within them.
SHORT = WorldPlan(seed=20390582, events=50, nodes=6, max_unavailable=2)
# The same schedule run on (its first 50 events are SHORT's): what breaks it is the mutant.
MUTANT = dataclasses.replace(SHORT, events=200)


@pytest.mark.timeout(1200)
def test_a_short_world_breaks_no_invariant(
    own_plane: tuple[ControlPlane, KubeCluster], tmp_path: Path
) -> None:
    plane, cluster = own_plane
    with chaos_world(plane, cluster, tmp_path) as world:
        report = run_world(world, SHORT, say=lambda line: print(line, flush=True))
    print(json.dumps(report.table(), indent=1))  # the figures, with -s
    assert report.breaches == []
    assert report.unsettled == {}
    assert sum(report.injected.values()) + sum(report.idle.values()) == SHORT.events
    drawn = {event.kind for event in schedule(SHORT)}
    assert drawn == set(KINDS)
    # Every kind drawn did something, but an end that found nothing to end.
    ends = {"workload-end", "admin-uncordon", "unskip", "untaint", "relabel-in", "image-pushed"}
    assert set(report.injected) >= drawn - ends, report.idle


@pytest.mark.timeout(1200)
def test_the_run_catches_the_reboot_hold_switched_off(
    own_plane: tuple[ControlPlane, KubeCluster], tmp_path: Path
) -> None:
    plane, cluster = own_plane
    with chaos_world(plane, cluster, tmp_path) as world:
        world.rig.coordinator_command = mutant_command("no-reboot-hold")
        say = lambda line: print(line, flush=True)  # noqa: E731
        report = run_world(world, MUTANT, stop_at_first_breach=True, say=say)
    assert schedule(MUTANT)[: SHORT.events] == schedule(SHORT)
    print(json.dumps(report.table(), indent=1))
    assert report.first_breach_event is not None
    assert report.first_breach_event < MUTANT.events
    # Without the hold, a rebooted node stays Done, or keeps driver-ready, unverified in its
    # new boot, or KMM's loader tries to unload the in-tree xe a daemon holds.
    caught = ("done-unverified", "ready-unverified", "kernel boundary")
    assert any(word in breach for breach in report.breaches for word in caught), report.breaches
