"""The rollout's worker loop: for each GPUDriver, gather the facts, decide, act.

One worker thread takes GPUDriver names from its own queue (filled by node, GPUDriver, Module
and claim changes, by agent answers, and by the decision's own wake-up times) and makes one
pass: gather.py reads the facts, decide.py decides (pure), act.py carries the decision out.
The nodes a pass considers are those the GPUDriver wants (gpuctl.gpudriver.targeting; none
while it is deleted or has no kernelModule), those carrying names.TARGET_LABEL=<driver>, and
those with its rollout state; the target is the Module's KMM version
(gpuctl.gpudriver.module_spec.kmm_version). A rollout that is refused (a conflict, an
unreadable spec.rollout) finishes the steps already begun and starts nothing
(gpuctl/rollout/place/refused.py).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from coordinator.health import NO_HEARTBEAT, Heartbeat
from coordinator.kube.client import KubeApi
from coordinator.kube.events import EventRecorder
from coordinator.kube.workqueue import WorkQueue, run_worker
from coordinator.rollout.act import API_ERROR_RETRY_SECONDS, RolloutActor
from coordinator.rollout.agent_calls import AgentCalls, CallTable
from coordinator.rollout.config import RolloutConfig
from coordinator.rollout.gather import RolloutGatherer, WatchCaches
from coordinator.rollout.kured_lock import KuredLockKeeper
from coordinator.rollout.live_reports import DriverlessWatch, LiveReports
from coordinator.rollout.metrics import RolloutMetrics
from coordinator.rollout.overlay import NodeOverlay
from coordinator.rollout.status_writes import StatusWrites
from coordinator.rollout.worker_holds import WorkerHolds
from gpuctl.common.names import Phase
from gpuctl.gpudriver.module_spec import module_name
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.event_notes import NORMAL, WARNING
from gpuctl.rollout.input.build import module_container
from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.input.pass_setup import pass_setup
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.place.refused import finishing_settings, refused_status

# A wake-up the decision asks for (a window opening, a soak or a step's timeout ending) is a
# moment on the wall clock made a delay on the monotonic one, and the work queue takes a
# pass's request no later than asked, a sooner pass standing in for it. Were the wall clock
# to jump (an NTP step; a test's clock), a long delay would miss its moment: a rollout that
# waits for one is looked at again at least this often.
WALL_CLOCK_RECHECK_SECONDS = 10.0
# How soon a rollout held by kured's lock looks again whether kured let it go.
KURED_RECHECK_SECONDS = 5.0
# A pass looks at every node, so its cost grows with the fleet (70 ms at 300 kwok nodes, 206 ms
# at 1,000), while the changes that ask for one do not slow down: at 1,000 nodes the loop made
# pass after pass, 85 % of the rollout's time, its CPU taken from the control plane and from
# KMM's one NodeModulesConfig worker beside it (docs/benchmarks.md). So after each pass the
# worker rests as long as the pass took (at most PASS_REST_MAX_SECONDS; one that waited on an
# unreachable server is not made to wait again), and the changes that come meanwhile are one
# pass: passes take at most about half the loop's time, and a change waits at most one pass
# longer. A Done node's slot still goes to the next node in the pass that writes Done.
PASS_REST_RATIO = 1.0
PASS_REST_MAX_SECONDS = 1.0


def pass_rest(pass_seconds: float) -> float:
    """How long the rollout's worker rests after a pass that took `pass_seconds`."""
    return min(max(0.0, pass_seconds) * PASS_REST_RATIO, PASS_REST_MAX_SECONDS)


class RolloutController:
    """Drives every managed GPUDriver's rollout; `run(stop)` in its own thread."""

    def __init__(
        self,
        kube: KubeApi,
        view: WatchCaches,
        *,
        agents: AgentCalls | None,
        events: EventRecorder,
        config: RolloutConfig,
        wall_clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
        metrics: RolloutMetrics | None = None,
        observing_since: Callable[[], float] | None = None,
        live_reports: LiveReports | None = None,
    ) -> None:
        self._events = events
        self._config = config
        self._metrics = metrics
        self._monotonic = monotonic
        self.queue = WorkQueue(monotonic)
        self.calls = CallTable(lambda: wall_clock().timestamp(), lambda _node: self.enqueue_all())
        self.overlay = NodeOverlay()
        # Each GPUDriver's last readable settings: a refused pass finishes its steps by them.
        self._readable_settings: dict[str, RolloutSettings] = {}
        self._pool = ThreadPoolExecutor(
            max(1, config.parallel_nodes), thread_name_prefix="rollout-node"
        )
        self.gatherer = RolloutGatherer(
            kube,
            view,
            config=config,
            calls=self.calls,
            overlay=self.overlay,
            pool=self._pool,
            wall_clock=wall_clock,
            monotonic=monotonic,
            observing_since=observing_since,
            live_reports=live_reports,
        )
        # A node whose GPU turns driverless starts at once (live_reports.py).
        self._driverless_watch = (
            DriverlessWatch(live_reports, self.enqueue_all) if live_reports is not None else None
        )
        self.actor = RolloutActor(
            kube,
            agents=agents,
            events=events,
            config=config,
            calls=self.calls,
            overlay=self.overlay,
            pool=self._pool,
            forget_pods=self.gatherer.forget_pods,
            wall_clock=wall_clock,
            monotonic=monotonic,
            metrics=metrics,
        )
        self.passes = 0
        self._worker_holds = WorkerHolds(kube, config.namespace, enabled=config.hold_workers)
        self._kured = (
            KuredLockKeeper(kube, config.kured, wall_clock) if config.kured is not None else None
        )
        # The trouble each GPUDriver was last told of by an Event (worker_holds.py).
        self._told_holds_trouble: dict[str, str] = {}
        # What this controller last wrote into each GPUDriver's status (the cache lags it).
        self._status_writes = StatusWrites(monotonic)

    # -- triggers ---------------------------------------------------------------------------

    def enqueue_all(self) -> None:
        for driver in self.gatherer.view.drivers():
            self.queue.add(str(driver["metadata"]["name"]))

    def changed(self, _kind: str = "", _obj: object = None) -> None:
        """Any change that can matter (a Node, GPUDriver, Module or claim): look again."""
        self.enqueue_all()

    def run(self, stop: threading.Event, heartbeat: Heartbeat = NO_HEARTBEAT) -> None:
        self.enqueue_all()
        run_worker(
            self.queue,
            self._counted_sync,
            stop,
            error_retry_seconds=API_ERROR_RETRY_SECONDS,
            failure="rollout pass failed",
            key_name="gpudriver",
            heartbeat=heartbeat,
            rest=pass_rest,
        )
        # Actions in flight finish or fail on their own (the LeaderFence refuses writes once
        # leadership is gone); stopping does not wait for a request to an unreachable server.
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._driverless_watch is not None:
            self._driverless_watch.close()

    def _counted_sync(self, name: str) -> float | None:
        started = self._monotonic()
        try:
            return self.sync(name)
        finally:
            self.passes += 1
            if self._metrics is not None:
                self._metrics.pass_seconds.observe(self._monotonic() - started)

    # -- one pass ---------------------------------------------------------------------------

    def _driver(self, name: str) -> dict[str, Any] | None:
        for driver in self.gatherer.view.drivers():
            if driver["metadata"]["name"] == name:
                return driver
        return None

    def sync(self, name: str) -> float | None:
        """One pass for one GPUDriver; seconds until it wants another, or None."""
        driver = self._driver(name)
        if driver is None:
            self._status_writes.forget(name)
            self.gatherer.forget_driver(name)
            if self._metrics is not None:
                self._metrics.forget(name)
            return None
        previous = dict((driver.get("status") or {}).get("rollout") or {})
        setup = pass_setup(driver, self.gatherer.view.drivers(), self._readable_settings.get(name))
        if setup.settings_read and setup.settings is not None:
            self._readable_settings[name] = setup.settings
        target, settings = setup.target, setup.settings
        if setup.refusal or settings is None:
            return self._finish_refused(driver, target, previous, setup.refusal, settings)
        inp = self.gatherer.gather(driver, target, settings, previous)
        inp = dataclasses.replace(
            inp,
            worker_holds=self._worker_holds.listed(),
            worker_holds_trouble=self._worker_holds.trouble,
        )
        if self._kured is not None:
            inp = dataclasses.replace(inp, kured_holder=self._kured.current())
        decision = decide(inp)
        if decision.ask_gate and settings.prometheus_gate is not None:
            # A node would start on an answer older than the gate allows: ask now, decide again.
            fresh = self.gatherer.ask_gate(name, settings.prometheus_gate)
            inp = dataclasses.replace(inp, gate=fresh)
            decision = decide(inp)
        inp, decision = self._hold_kured_lock(inp, decision)
        requeue = self._execute(driver, inp, decision)
        if decision.rollback is not None and requeue is None:
            # Before the status write: the spec patch carries the resourceVersion read.
            requeue = self.actor.roll_back(driver, decision.rollback)
        written = self._status_writes.due(driver, decision.status, decision.revisions)
        if written:
            self._write_status(driver, written)
        for event in decision.events:
            self._events.record(driver, event.kind, event.reason, event.message)
        if self._metrics is not None:
            blocked = [n.reason_kind for n in inp.nodes if n.phase is Phase.BLOCKED]
            self._metrics.record(
                name, decision.status, decision.node_phases, decision.node_versions, blocked
            )
        return self._look_again_in(name, decision.requeue_after if requeue is None else requeue)

    def _hold_kured_lock(
        self, inp: RolloutInput, decision: Decision
    ) -> tuple[RolloutInput, Decision]:
        """Before the write that starts a node's step (to Checking): kured's lock taken for
        gpuctl, read afresh. Where kured holds it, the pass decides again with kured's node as
        the hold: nodes mid-step finish, none starts (kured_lock.py). A pass that only moves
        nodes already in a step reads nothing: the lock is gpuctl's since their start, and
        `sync` renews it after each pass."""
        if self._kured is None:
            return inp, decision
        starts = any(
            isinstance(action, PatchNode) and action.phase_to is Phase.CHECKING
            for action in decision.actions
        )
        if not starts:
            return inp, decision
        holder = self._kured.hold()
        if holder:
            inp = dataclasses.replace(inp, kured_holder=holder)
            decision = decide(inp)
        if inp.kured_holder:
            decision.wake(KURED_RECHECK_SECONDS)
        return inp, decision

    def _execute(
        self, driver: Mapping[str, Any], inp: RolloutInput, decision: Decision
    ) -> float | None:
        """The decision carried out; after its node writes, the hold list the Nodes make,
        written once (worker_holds.py). The soonest retry either asks for."""
        requeue = self.actor.execute(driver, inp, decision)
        nodes = self.overlay.apply(self.gatherer.view.nodes())
        holds_retry = self._worker_holds.sync(nodes)
        if self._kured is not None:
            self._kured.sync(nodes)
        self._tell_worker_holds(driver)
        if holds_retry is None:
            return requeue
        return holds_retry if requeue is None else min(requeue, holds_retry)

    def _tell_worker_holds(self, driver: Mapping[str, Any]) -> None:
        """A Warning Event when the hold list could not be written (once per trouble), a
        Normal one when it is written again."""
        name = str(driver["metadata"]["name"])
        trouble, told = self._worker_holds.trouble, self._told_holds_trouble.get(name, "")
        if trouble == told:
            return
        self._told_holds_trouble[name] = trouble
        if trouble:
            self._events.record(driver, WARNING, "WorkerHoldsNotWritten", trouble)
        else:
            self._events.record(
                driver, NORMAL, "WorkerHoldsWritten", "the worker holds are written again"
            )

    def _look_again_in(self, name: str, requeue: float | None) -> float | None:
        """`requeue`, or sooner if a progress-only status write was held back
        (status_writes.py): a pass when it is due; never later than
        WALL_CLOCK_RECHECK_SECONDS."""
        held = self._status_writes.held_for(name)
        if held is not None:
            requeue = held if requeue is None else min(requeue, held)
        return None if requeue is None else min(requeue, WALL_CLOCK_RECHECK_SECONDS)

    def _write_status(self, driver: Mapping[str, Any], fields: dict[str, Any]) -> None:
        patch = self._status_writes.patch(driver, fields)
        resource_version = self.actor.write_status(driver, patch)
        self._status_writes.wrote(str(driver["metadata"]["name"]), fields, resource_version)

    def _finish_refused(
        self,
        driver: dict[str, Any],
        target: str | None,
        previous: Mapping[str, Any],
        why: str,
        settings: RolloutSettings | None,
    ) -> float | None:
        """A refused rollout (gpuctl/rollout/place/refused.py): Paused with why, about `target`
        (nothing of another version's status is kept); the nodes already in a step finish it at the
        version the
        Module asks for, and nothing starts."""
        name = str(driver["metadata"]["name"])
        module = self.gatherer.view.module(self._config.namespace, module_name(name))
        asked = str(module_container(module).get("version") or "") or None
        inp = self.gatherer.gather(
            driver, asked, finishing_settings(settings), previous, finishing=True
        )
        decision = decide(inp) if inp.nodes else Decision()
        requeue = self._execute(driver, inp, decision)
        status = refused_status(target, why, inp.nodes)
        if self._status_writes.due(driver, status):
            # A repeat of the same refusal bumps the one Event's count (EventRecorder).
            self._events.record(driver, WARNING, "InvalidRollout", why)
            self._write_status(driver, {"rollout": status})
        if self._metrics is not None:
            blocked = [n.reason_kind for n in inp.nodes if n.phase is Phase.BLOCKED]
            self._metrics.record(
                name, status, decision.node_phases, decision.node_versions, blocked
            )
        return self._look_again_in(name, requeue if requeue is not None else decision.requeue_after)
