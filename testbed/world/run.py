"""One world run: a fleet on KMM's own operator, seeded real-world events, invariants all along.

`run_world(world, plan)`:
- `plan.nodes` nodes at OLD with real `gpuctl-agent` processes, two coordinator replicas kept
  running as a Deployment would (testbed/chaos/replicas.py), the DaemonSet controller and a
  scheduler for the GPU DaemonSets the events install (testbed/world/daemons.py; the GPUDriver
  declares one in rollout.pause), the GPUDriver moved to a first new version;
- the plan's events (testbed/world/plan.py, done by testbed/world/events.py) one after the
  other, each after its gap, while the rollout moves;
- the invariants (testbed/world/invariants.py) on every Node event and every half second, the
  kernel boundary after every event; with `stop_at_first_breach` the run ends at the event that
  broke one (the index to replay), and reports the end as it stands;
- then the world goes quiet (every workload ends, the undeclared GPU DaemonSet is deleted, the
  admin uncordons and unskips, KMM is fast again, the rollout resumed) and the rollout must
  converge: every node Done at the target, verified in its current boot, or Failed with a
  reason (`unsettled` lists the others).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuctl.common import names
from testbed.chaos.replicas import Replicas
from testbed.chaos.run import CHAOS_TIMEOUTS
from testbed.chaos.world import ChaosWorld
from testbed.cluster_api import TEST_LABEL
from testbed.rollout_live.images import OLD
from testbed.rollout_live.node_watch import NodeWatch
from testbed.rollout_live.scenario import old_root
from testbed.rollout_live.worker_hold_guard import installed_worker_hold_guard
from testbed.world.daemons import (
    UNDECLARED,
    label_agent_pods,
    pause_settings,
    report_capacity,
    world_daemons,
)
from testbed.world.events import (
    EVENTS,
    SELECTED_LABEL,
    SELECTED_VALUE,
    NoOp,
    World,
    admin_uncordon,
    daemons_undeclared,
    image_pushed,
    kmm_slow,
    pause_resume,
    relabel_in,
    unskip,
    untaint,
    workload_end,
)
from testbed.world.invariants import Checks, verified_in_this_boot
from testbed.world.plan import Event, WorldPlan, schedule

POLL_SECONDS = 0.5
SETTLE_POLL_SECONDS = 0.5


@dataclass
class WorldReport:
    seed: int
    injected: Counter[str] = field(default_factory=Counter)
    # Events drawn that found nothing to do (testbed/world/events.py NoOp), by kind.
    idle: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)
    # Unloads on a busy node the kernel refused, raced by a holder's open (invariants.py).
    raced: list[str] = field(default_factory=list)
    # The index of the event during or after which the first breach was seen (None: none).
    first_breach_event: int | None = None
    unsettled: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def table(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "events": sum(self.injected.values()) + sum(self.idle.values()),
            "injected": dict(sorted(self.injected.items())),
            "idle": dict(sorted(self.idle.items())),
            "breaches": self.breaches,
            "raced": self.raced,
            "first_breach_event": self.first_breach_event,
            "unsettled": self.unsettled,
            "failed": self.failed,
            "seconds": round(self.seconds, 1),
        }


class _Run:
    def __init__(self, world: ChaosWorld, plan: WorldPlan, say: Callable[[str], None]) -> None:
        self.rig = world.rig
        self.layout = world.plane.layout
        self.plan = plan
        self.say = say
        self.report = WorldReport(plan.seed)
        self.doing = "setup"
        self.world: World | None = None
        self.checks: Checks | None = None
        self.watch: NodeWatch | None = None
        self.replicas = Replicas(self.rig, 2)
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="world-checks", daemon=True)
        self._guard = contextlib.ExitStack()

    def setup(self) -> None:
        rig, plan = self.rig, self.plan
        # The chart's guard of KMM's worker Pods, as every real install has it: the
        # coordinator's worker hold (--kmm-worker-hold) is enforced by it.
        self._guard.enter_context(installed_worker_hold_guard(rig.kube, rig.namespace))
        nodes = [rig.add_node(f"w{i:02d}", old_root) for i in range(plan.nodes)]
        for node in nodes:
            rig.label_node(node, {SELECTED_LABEL: SELECTED_VALUE})
            report_capacity(rig.kube, node)
        # Every holder's open (a host daemon's, a GPU DaemonSet's pod's), for the kernel's races.
        opens: list[tuple[str, float]] = []
        daemons = self._guard.enter_context(
            world_daemons(self.layout, rig, lambda node: opens.append((node, time.time())))
        )
        rollout = {
            "holdAfterFirstNode": False,
            "maxUnavailable": plan.max_unavailable,
            "timeouts": CHAOS_TIMEOUTS,
            # A node whose load a reboot interrupted may fail its step (with its reason); the
            # rollout goes on with the others.
            "failureBudget": plan.nodes,
            # XPU Manager's DaemonSet, when the events install it, is paused for each step.
            "pause": pause_settings(rig.namespace),
        }
        rig.create_driver(OLD, rollout)
        # Only what it names is tolerated: the admin's taint takes a node out (events.taint);
        # and it selects SELECTED_LABEL too, which the admin takes off (events.relabel_out).
        rig.patch_driver(
            {
                "spec": {
                    "tolerateAllTaints": False,
                    "nodeSelector": {SELECTED_LABEL: SELECTED_VALUE},
                }
            }
        )
        self.replicas.start()
        for node in nodes:
            rig.start_agent(node)
        label_agent_pods(rig.kube, rig.namespace, rig.pods.pods)
        rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=240)
        world = World(rig, self.replicas, nodes, opens=opens, daemons=daemons)
        self.world = world
        self.checks = Checks(
            plan.max_unavailable,
            rig.hosts,
            world.wanted,
            lambda: self.doing,
            world.opens,
            undeclared=(
                f"DaemonSet {rig.namespace}/{UNDECLARED}",
                lambda: daemons.holds(UNDECLARED),
            ),
        )
        # The rig's own last check (every unload on a busy node) leaves out what the run
        # judged already (raced, or a breach in the report): it catches only what came later.
        rig.unload_excused = self.checks.judged
        self.watch = NodeWatch(
            rig.kube, f"{TEST_LABEL}={rig.namespace}", [self.checks.bound], survive_outages=True
        )
        self.watch.start()
        self._poller.start()
        self.say(f"{len(nodes)} nodes Done at {OLD}; the GPUDriver moves to {world.next_version()}")

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            assert self.checks is not None
            assert self.watch is not None
            self.checks.poll(dict(self.watch.nodes), time.monotonic())

    def breaches(self) -> list[str]:
        assert self.checks is not None
        assert self.watch is not None
        return [*self.watch.breaches, *self.checks.breaches]

    def run(self, events: list[Event], stop_at_first_breach: bool) -> None:
        assert self.world is not None
        assert self.checks is not None
        for event in events:
            time.sleep(event.gap)
            node = self.world.nodes[event.node]
            self.doing = f"event {event.index} ({event.kind} on {node})"
            detail = EVENTS[event.kind](self.world, node, event.choice)
            counted = self.report.idle if isinstance(detail, NoOp) else self.report.injected
            counted[event.kind] += 1
            self.checks.kernel(self.rig.kmm.unloads_while_busy())
            line = f"{event.index}: {event.kind}: {detail}"
            self.report.log.append(line)
            self.say(line)
            if self.report.first_breach_event is None and self.breaches():
                self.report.first_breach_event = event.index
                self.say(f"breach after event {event.index}: {self.breaches()[0]}")
                if stop_at_first_breach:
                    return

    def quiet(self) -> None:
        """The world stops changing: what the events left undone is undone."""
        w = self.world
        assert w is not None
        self.doing = "the quiet end"
        for node in sorted(w.busy):
            workload_end(w, node, 0.0)
        if UNDECLARED in w.daemon_sets:
            self.say(daemons_undeclared(w, "", 0.0))
        for node in sorted(w.cordoned):
            admin_uncordon(w, node, 0.0)
        for node in sorted(w.skipped):
            unskip(w, node, 0.0)
        for node in sorted(w.tainted):
            untaint(w, node, 0.0)
        for node in sorted(w.unselected):
            relabel_in(w, node, 0.0)
        for node in sorted(w.slow):
            kmm_slow(w, node, 0.0)
        image_pushed(w, "", 0.0)
        if w.paused:
            self.say(pause_resume(w, "", 0.0))

    def unsettled(self) -> tuple[dict[str, str], dict[str, str]]:
        """Nodes not Done at the target verified in their current boot, and which of them are
        Failed with a reason (the end an admin is asked to act on)."""
        w = self.world
        assert w is not None
        left, failed = {}, {}
        for node in w.nodes:
            obj = self.rig.node(node)
            labels = obj["metadata"].get("labels") or {}
            notes = obj["metadata"].get("annotations") or {}
            phase, version = labels.get(names.STATE_LABEL, ""), notes.get(names.STATE_VERSION)
            reason = notes.get(names.REASON, "")
            if phase == "Done" and version == w.target and verified_in_this_boot(obj):
                continue
            if phase == "Failed" and reason:
                failed[node] = reason
                continue
            left[node] = f"{phase} {version}: {reason!r}"
        return left, failed

    def finish(self, stall_seconds: float) -> None:
        self._stop.set()
        if self.world is None:
            self.replicas.stop()
            self._guard.close()
            return
        try:
            self.quiet()
            left, _ = self.unsettled()
            last_move = time.monotonic()
            while left and time.monotonic() - last_move < stall_seconds:
                time.sleep(SETTLE_POLL_SECONDS)
                now, _ = self.unsettled()
                if now != left:
                    left, last_move = now, time.monotonic()
            self.report.unsettled, self.report.failed = self.unsettled()
        finally:
            assert self.checks is not None
            assert self.watch is not None
            self.checks.kernel(self.rig.kmm.unloads_while_busy())
            self.watch.stop()
            self.report.breaches = self.breaches()
            self.report.raced = list(self.checks.raced)
            self.replicas.stop()
            self._guard.close()


def run_world(
    world: ChaosWorld,
    plan: WorldPlan,
    events: list[Event] | None = None,
    *,
    stop_at_first_breach: bool = False,
    settle_stall_seconds: float = 120.0,
    say: Callable[[str], None] = lambda _line: None,
) -> WorldReport:
    started = time.monotonic()
    run = _Run(world, plan, say)
    stopped = False
    try:
        run.setup()
        run.run(schedule(plan) if events is None else events, stop_at_first_breach)
        stopped = run.report.first_breach_event is not None and stop_at_first_breach
    finally:
        # A run stopped at its breach has made its point: the end is reported as it stands.
        run.finish(0.0 if stopped else settle_stall_seconds)
        run.report.seconds = time.monotonic() - started
    return run.report
