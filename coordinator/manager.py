"""The coordinator process wired together: leader election, watches, work queue, reconciler.

`Coordinator.run(stop)` campaigns for the Lease; once leading it starts the watch caches
(GPUDrivers, the namespace's Modules and ModuleImagesConfigs, Nodes, ResourceClaims, Pods), a
discovery poller that notices KMM (or DRA) being installed or removed, one worker that
reconciles GPUDrivers by name, and the rollout engine's worker (coordinator/rollout) over the
same caches; their writes go through a LeaderFence, so none is sent after the Lease's renew
deadline. Every relevant change enqueues the GPUDrivers it concerns, so the coordinator reacts
within a second. It returns when `stop` is set (releasing the Lease) or leadership is lost.
Clients and clocks are parameters, so tests run it in a thread against the test API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from coordinator.caches import Caches
from coordinator.drivers.kmm_check import KmmSupportCheck
from coordinator.drivers.reconciler import Reconciler, ReconcilerConfig
from coordinator.filters import FOLLOW_WITHIN_SECONDS, ChangeFilter, Requests
from coordinator.health import Heartbeat, Liveness, Verdict
from coordinator.kube.client import KubeApi
from coordinator.kube.discovery import Discover, Discovery, api_discovery
from coordinator.kube.events import EventRecorder
from coordinator.kube.fence import LeaderFence
from coordinator.kube.leader import LeaderElector, LeaseConfig
from coordinator.kube.watches import Informer, Resource
from coordinator.kube.workqueue import WorkQueue, run_worker
from coordinator.rollout.agent_calls import AgentCalls
from coordinator.rollout.config import KuredLockConfig, PrometheusAccess, RolloutConfig
from coordinator.rollout.controller import RolloutController
from coordinator.rollout.live_reports import LiveReports
from coordinator.rollout.metrics import RolloutMetrics
from gpuctl.common import names, timestamps
from gpuctl.common.gpu_claims import DRA_GROUP
from gpuctl.common.names import KMM_GROUP, KMM_IMAGES_CONFIG_PLURAL, KMM_VERSION
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from gpuctl.gpudriver.driver_nodes import watched_node_part
from gpuctl.rollout.input.gpu_pod_watch import pod_node, watched_part
from gpuctl.rollout.input.kmm_boots import boot_part

log = logging.getLogger(__name__)

ERROR_RETRY_SECONDS = 5.0
COMPONENT = "gpuctl-coordinator"
# Liveness: how long one loop may go without a beat before it counts as wedged. A Lease round
# makes two API requests (30 s timeout each); a reconcile or rollout pass makes several and
# may wait for agents' answers. Far beyond any healthy pass, far below "stuck for good".
LEASE_LOOP_WITHIN_SECONDS = 90.0
PASS_WITHIN_SECONDS = 300.0
# How long a stopping coordinator waits for its threads, all together.
STOP_JOIN_SECONDS = 5.0


def rfc3339_now() -> str:
    return timestamps.format_seconds(datetime.now(UTC))


@dataclass(frozen=True)
class CoordinatorConfig:
    namespace: str
    identity: str
    lease_name: str = names.DEFAULT_COORDINATOR_LEASE
    events_namespace: str = "default"
    loader_service_account: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    # This replica's gpuctl version, written on the Lease it holds.
    version: str = ""
    discovery_interval: float = 2.0
    # Every GPUDriver reconciled (and its rollout looked at) this often without an event.
    resync_seconds: float = 60.0
    # Manage only the GPUDrivers with these labels (a label selector; None: all of them).
    driver_selector: str | None = None
    # Serve only the Nodes with these labels (a label selector; None: every Node): one
    # coordinator per node pool (coordinator/live_nodes/access/node_scope.py).
    node_selector: str | None = None
    # How often the rollout asks a Blocked node's agent whether its blocker went away.
    rollout_blocked_recheck_seconds: float = 30.0
    # Hold KMM's worker off a node opened after the check (the chart's guard enforces it).
    kmm_worker_hold: bool = False
    # kured's reboot lock (coordinator/rollout/kured_lock.py); None: kured is not looked at.
    kured: KuredLockConfig | None = None
    # The bearer token and CA bundle for gates' Prometheus servers.
    prometheus: PrometheusAccess = field(default_factory=PrometheusAccess)


class LeaderScoped(Protocol):
    """Something only the leader runs (the agents' gRPC server): started when leading."""

    def start(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...


class Coordinator:
    """One coordinator replica."""

    def __init__(
        self,
        kube: KubeApi,
        config: CoordinatorConfig,
        *,
        discover: Discover | None = None,
        leader_scoped: Sequence[LeaderScoped] = (),
        rollout_agents: AgentCalls | None = None,
        rollout_reports: LiveReports | None = None,
        rollout_metrics: RolloutMetrics | None = None,
        liveness: Liveness | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        rollout_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._liveness = liveness
        # The caches readiness waits for, once leading (empty until _lead made them).
        self._caches_to_sync: tuple[Informer, ...] = ()
        self._config = config
        self._discovery = Discovery(discover or api_discovery(kube), config.discovery_interval)
        self._leader_scoped = tuple(leader_scoped)
        self._leader_scoped_started: list[LeaderScoped] = []
        # The node agents the rollout asks (None: no --grpc-port, so no node is ever labelled).
        self._rollout_agents = rollout_agents
        self._rollout_reports = rollout_reports
        self._rollout_metrics = rollout_metrics
        self.rollout: RolloutController | None = None
        self._wall_clock = wall_clock
        # The rollout's wall clock (step timeouts, maintenance windows); the Lease keeps
        # wall_clock, so a test may move the rollout's time without touching leadership.
        self._rollout_clock = rollout_clock or wall_clock
        self._monotonic = monotonic
        self.queue = WorkQueue(monotonic)
        self.elector = LeaderElector(
            kube,
            LeaseConfig(
                namespace=config.namespace,
                name=config.lease_name,
                identity=config.identity,
                lease_duration=config.lease_duration,
                renew_deadline=config.renew_deadline,
                retry_period=config.retry_period,
                holder_version=config.version,
            ),
            now=wall_clock,
            monotonic=monotonic,
        )
        # The leader's work writes through the fence: nothing once the renew deadline passed.
        self.fence = LeaderFence(kube, self.elector.write_budget)
        self._kube: KubeApi = self.fence
        self._work_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # What each watch event asks for (the event filters, coordinator/filters.py), one
        # handler per informer.
        self._filter = ChangeFilter()
        self._on_driver = self._handler(self._filter.driver)
        self._on_module = self._handler(self._filter.module)
        self._on_node = self._handler(self._filter.node)
        self._on_claim = self._handler(self._filter.claim)
        self._on_images_config = self._handler(self._filter.images_config)
        self._on_node_config = self._handler(self._filter.node_config)
        self._on_pod = self._handler(self._filter.pod)
        self.reconciles = 0
        self.lost_leadership = False

    # -- change handlers: which GPUDrivers a change concerns --------------------------------

    def _enqueue_all(self, within: float = 0.0) -> None:
        """Every GPUDriver, at once or (`within` seconds) with the changes around it."""
        for driver in self._drivers.snapshot():
            name = driver["metadata"]["name"]
            if within:
                self.queue.add_within(name, within)
            else:
                self.queue.add(name)

    def _rollout_changed(self) -> None:
        if self.rollout is not None:
            self.rollout.changed()

    def _apply(self, requests: Requests) -> None:
        """Carry out what a watch event asks (coordinator/filters.py)."""
        if requests.rollout:
            self._rollout_changed()
        for name in requests.now:
            self.queue.add(name)
        for name in requests.follow:
            self.queue.add_within(name, FOLLOW_WITHIN_SECONDS)
        if requests.every:
            self._enqueue_all()
        if requests.every_follow:
            self._enqueue_all(within=FOLLOW_WITHIN_SECONDS)

    def _handler(
        self, event_filter: Callable[[str, dict[str, Any]], Requests]
    ) -> Callable[[str, dict[str, Any]], None]:
        """An informer's handler: each event through `event_filter`, its requests carried out."""
        return lambda kind, obj: self._apply(event_filter(kind, obj))

    # -- threads --------------------------------------------------------------------------

    def _start(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _informer(
        self,
        resource: Resource,
        handler: Callable[[str, dict[str, Any]], None],
        available: Callable[[], bool] | None = None,
    ) -> Informer:
        informer = Informer(
            self._kube, resource, handler, self._work_stop, monotonic=self._monotonic
        )
        if available is not None:
            informer.available = available
        return informer

    def _poll_discovery(self) -> None:
        kmm = self._discovery.kmm_installed()
        next_resync = self._monotonic() + self._config.resync_seconds
        while not self._work_stop.wait(self._config.discovery_interval):
            self._discovery.refresh()
            now_kmm = self._discovery.kmm_installed()
            if now_kmm != kmm:
                log.info("KMM installation changed", extra={"kmm_installed": now_kmm})
                kmm = now_kmm
                self._enqueue_all()
            if self._monotonic() >= next_resync:
                next_resync = self._monotonic() + self._config.resync_seconds
                self._enqueue_all()

    def _work(self, reconciler: Reconciler) -> None:
        def reconcile(name: str) -> float | None:
            if self._drivers.get(name) is None:
                return None  # gone, or not one of ours (--gpudriver-selector)
            try:
                return reconciler.reconcile(name)
            finally:
                self.reconciles += 1

        run_worker(
            self.queue,
            reconcile,
            self._work_stop,
            error_retry_seconds=ERROR_RETRY_SECONDS,
            failure="reconcile failed",
            key_name="gpudriver",
            heartbeat=self._heartbeat("reconcile-worker", PASS_WITHIN_SECONDS),
        )

    def _lead(self) -> None:
        log.info("leading", extra={"identity": self._config.identity})
        self._discovery.refresh()
        dra = self._discovery.dra_version() or "v1"
        self._drivers = self._informer(
            Resource(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL), self._on_driver
        )
        self._drivers.label_selector = self._config.driver_selector
        modules = self._informer(
            Resource(KMM_GROUP, KMM_VERSION, KMM_PLURAL, self._config.namespace),
            self._on_module,
            self._discovery.kmm_installed,
        )
        # KMM's record of which images exist: a reload waits until KMM has found its image.
        images_configs = self._informer(
            Resource(KMM_GROUP, KMM_VERSION, KMM_IMAGES_CONFIG_PLURAL, self._config.namespace),
            self._on_images_config,
            self._discovery.kmm_installed,
        )
        # KMM's record of the boot its loader last ran in, per node: a node is Done only when
        # KMM's loader ran in its current boot (gpuctl/rollout/input/kmm_boots.py).
        node_configs = self._informer(
            Resource(KMM_GROUP, KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL),
            self._on_node_config,
            self._discovery.kmm_installed,
        )
        node_configs.keep = boot_part
        nodes = self._informer(Resource("", "v1", "nodes"), self._on_node)
        nodes.keep = watched_node_part
        nodes.label_selector = self._config.node_selector
        claims = self._informer(
            Resource(DRA_GROUP, dra, "resourceclaims"),
            self._on_claim,
            lambda: self._discovery.dra_version() is not None,
        )
        # The rollout never reads claims it cannot trust as "no claims" (Informer.trouble):
        # after a failure it lists again rather than watching on.
        claims.relist_after_error = True
        # The cluster's Pods, each kept as the little the rollout reads, found by node. Where
        # this watch cannot be trusted the rollout lists the node's pods instead, and it
        # always lists them afresh before a KMM write.
        pods = self._informer(Resource("", "v1", "pods"), self._on_pod)
        pods.keep, pods.index_of = watched_part, pod_node
        pods.relist_after_error = True
        caches = Caches(
            self._drivers,
            nodes,
            claims,
            modules,
            pods=pods,
            images_configs=images_configs,
            node_configs=node_configs,
            leading_since=self._monotonic(),
        )
        reconciler, rollout = self._controllers(caches)
        # The images too: a reload is held until KMM has found its image, and a record not
        # read yet would hold it for a wrong reason. (A KMM that does not serve them counts
        # as synced at once: the collection is found not served.)
        # Not KMM's NodeModulesConfigs: a node waits for them only to be Done (unread is
        # unknown, never verified), and a coordinator under an older chart's RBAC cannot list
        # them: it must still run, and say why its nodes wait.
        self._caches_to_sync = (nodes, claims, modules, self._drivers, pods, images_configs)
        for informer in (*self._caches_to_sync, node_configs):
            self._start(f"watch-{informer.resource.plural}", informer.run)
        self._start_work(
            reconciler,
            rollout,
            first=(nodes, self._drivers),
            then=(claims, modules, images_configs),
        )

    def _controllers(self, caches: Caches) -> tuple[Reconciler, RolloutController]:
        """The GPUDriver reconciler and the rollout, on the leader's caches."""
        events = EventRecorder(
            self._kube,
            self._config.events_namespace,
            COMPONENT,
            rfc3339_now,
            host=self._config.identity,
        )
        reconciler = Reconciler(
            self._kube,
            discovery=self._discovery,
            kmm_support=KmmSupportCheck(self._kube),
            view=caches,
            events=events,
            config=ReconcilerConfig(self._config.namespace, self._config.loader_service_account),
            now=rfc3339_now,
        )
        rollout = RolloutController(
            self._kube,
            caches,
            agents=self._rollout_agents,
            events=events,
            config=RolloutConfig(
                self._config.namespace,
                blocked_recheck_seconds=self._config.rollout_blocked_recheck_seconds,
                hold_workers=self._config.kmm_worker_hold,
                prometheus=self._config.prometheus,
                kured=self._config.kured,
            ),
            wall_clock=self._rollout_clock,
            monotonic=self._monotonic,
            metrics=self._rollout_metrics,
            observing_since=caches.observing_since,
            live_reports=self._rollout_reports,
        )
        return reconciler, rollout

    def _start_work(
        self,
        reconciler: Reconciler,
        rollout: RolloutController,
        *,
        first: tuple[Informer, ...],
        then: tuple[Informer, ...],
    ) -> None:
        """The reconciler once the caches it plans on (`first`: Nodes, GPUDrivers) are
        filled, the rollout once those it also needs (`then`: claims for its checks, Modules
        for the version asked for, KMM's found images for reloads) are; then the
        leader-scoped parts."""

        def synced(informers: tuple[Informer, ...]) -> bool:
            for informer in informers:
                while not informer.wait_synced(0.5):
                    if self._work_stop.is_set():
                        return False
            return True

        def start_work_once_synced() -> None:
            # Waiting here, not in _lead, keeps the Lease renewing meanwhile.
            if not synced(first):
                return
            self._start("discovery", self._poll_discovery)
            self._start("reconcile", lambda: self._work(reconciler))
            if not synced(then):
                return
            self.rollout = rollout
            beat = self._heartbeat("rollout-worker", PASS_WITHIN_SECONDS)
            self._start("rollout", lambda: rollout.run(self._work_stop, beat))

        self._start("start-work", start_work_once_synced)
        for part in self._leader_scoped:
            try:
                part.start()
            except Exception:
                # The rollout then has no agent reports and moves no node: safe. Later parts
                # depend on earlier ones (the serving label on the server), so stop here.
                log.exception("could not start", extra={"part": type(part).__name__})
                break
            self._leader_scoped_started.append(part)

    def _stop_leading(self) -> None:
        self._work_stop.set()
        while self._leader_scoped_started:
            self._leader_scoped_started.pop().stop()

    def _heartbeat(self, loop: str, within: float) -> Heartbeat:
        return Heartbeat(self._liveness, loop, within)

    def readiness(self) -> Verdict:
        """Ready: a standby that reads the Lease (it can take over at once), or the leader
        once its caches are synced. Not ready: no Lease read lately (API server unreachable,
        no permission), or leading with caches still listing."""
        read = self.elector.last_lease_read
        if read is None:
            return Verdict(False, "has not read the Lease yet")
        age = self._monotonic() - read
        if age > self._config.lease_duration:
            return Verdict(False, f"could not read the Lease for {age:.0f}s")
        if not self.elector.leading.is_set():
            return Verdict(True, "standby, ready to lead")
        caches = self._caches_to_sync
        unsynced = [str(c.resource.plural) for c in caches if not c.synced]
        if not caches or unsynced:
            waiting = ", ".join(unsynced) or "all"
            return Verdict(False, f"leading, caches not synced yet: {waiting}")
        return Verdict(True, "leading, caches synced")

    def run(self, stop: threading.Event) -> None:
        """Campaign and work until `stop` is set or leadership is lost."""
        self.elector.run(
            stop,
            on_started=self._lead,
            on_stopped=self._stop_leading,
            heartbeat=self._heartbeat("lease", LEASE_LOOP_WITHIN_SECONDS),
        )
        self.lost_leadership = not stop.is_set()
        self._stop_leading()
        self._kube.close()
        # One allowance for all of them: a thread stuck in a request to an unreachable API
        # server must not hold the stop for 5 s each.
        deadline = time.monotonic() + STOP_JOIN_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if not self.lost_leadership:
            self.elector.release()
        log.info("stopped", extra={"lost_leadership": self.lost_leadership})
