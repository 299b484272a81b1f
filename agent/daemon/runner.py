"""The agent daemon's event loop: stream, udev, timers, inspections and health together.

Why asyncio (grpc.aio) and not threads: everything the daemon waits for is an fd or a timer
(the gRPC stream, the udev netlink socket, the heartbeat and rescan deadlines, the udev
debounce), and one event loop blocks on all of them in a single epoll_wait. Idle, nothing
runs: no thread wakes to poll, and there are no locks between a reader thread, a writer
thread and a timer thread to get wrong. The one blocking job, the inspection (file reads
under the host root, up to a /proc walk on a busy node), runs on a single worker thread
(`run_in_executor` with one thread), which also makes overlapping inspections impossible.
The HTTP probe server is the stdlib's, on its own thread, reading a locked HealthState.

Flow (see proto/gpuctl/api/v1alpha1/agent_service.proto for the contract):
  link (agent.daemon.link): read token -> dial -> Hello -> Welcome -> Session; on any end,
      log why in plain words, wait a full-jitter backoff, repeat.
  worker: take the pending triggers (work.PendingWork), inspect once, then on the current
      session send CONNECTED (first report of a stream), REQUESTED (one per request id,
      changed or not) or DEVICE_EVENT / RESCAN (only when the report changed, within the
      coordinator's report rate).
  node changes (agent.daemon.node_actions): PrepareRequest / RestoreRequest are queued for
      the worker, which runs them on its thread before the next inspection (never during
      one, never two at once) and answers on the stream they came on; a change trigger
      follows, so the report shows the node after.
  rescan timer, udev watcher, heartbeat timer: add triggers or fill silences.
The loop inspects at startup and on every rescan even while disconnected, so /healthz
tells whether inspections work, independently of the coordinator.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import grpc
import grpc.aio

from agent.daemon.changes import report_changed
from agent.daemon.config import DaemonConfig
from agent.daemon.dispatch import RequestDispatch
from agent.daemon.health import HealthState
from agent.daemon.health_grpc import HealthGrpcServer
from agent.daemon.health_http import HealthHttpServer
from agent.daemon.link import CoordinatorLink
from agent.daemon.node_actions import (
    NO_REQUEST_ID,
    NODE_ACTION_KINDS,
    NodeActionJob,
    NodeActions,
    describe_answer,
    request_id_of,
)
from agent.daemon.session import Intervals, Session
from agent.daemon.uevent_watch import UeventWatcher
from agent.daemon.uevents import Debouncer, EventSource, network_namespace_warning
from agent.daemon.work import DEVICE_EVENT, RESCAN, PendingWork, Trigger
from agent.hostfs import HostFiles
from agent.hostroot import HostRootError
from agent.inspect import MODULE_NAME
from agent.sysfs_write import SysfsWriter
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb

log = logging.getLogger("agent.daemon")

OWN_NETWORK_NAMESPACE = Path("/proc/self/ns/net")

Inspector = Callable[[datetime.datetime], pb.NodeReport]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class AgentDaemon:
    """Run with `await AgentDaemon(...).run(stop)`; returns once `stop` is set and the
    stream, servers and watcher are closed."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        inspect: Inspector,
        agent_version: str,
        uniform: Callable[[float, float], float],
        event_source: Callable[[], EventSource] | None,
        writer: SysfsWriter | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`writer` makes the node changes of PrepareRequest/RestoreRequest; without one
        the agent answers them with an error and changes nothing."""
        self.config = config
        self._inspect = inspect
        self._agent_version = agent_version
        self._uniform = uniform
        self._event_source = event_source
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        self.pending = PendingWork()
        self.rescan_interval = config.default_rescan_interval
        self.health = HealthState(
            monotonic=monotonic,
            wall_clock=wall_clock,
            stale_after=config.stale_after(config.default_rescan_interval),
        )
        self.node_actions = NodeActions(
            inspect=lambda: inspect(wall_clock()),
            files=HostFiles(config.host_root),
            writer=writer,
            module_name=MODULE_NAME,
        )
        self._node_action_jobs: deque[NodeActionJob] = deque()
        self.dispatch = RequestDispatch(
            {
                "inspect": self._on_inspect_request,
                "welcome": self._on_welcome,
                **dict.fromkeys(NODE_ACTION_KINDS, self._on_node_action_request),
            }
        )
        self.link = CoordinatorLink(
            config,
            agent_version=agent_version,
            dispatch=self.dispatch,
            health=self.health,
            on_session=self._on_session,
            uniform=uniform,
            monotonic=monotonic,
        )
        self.http_port: int | None = None
        self.grpc_health_port: int | None = None
        self._deferred_change: asyncio.TimerHandle | None = None
        # Set once the health servers listen and the loop runs (tests and benches wait on it
        # from other threads).
        self.listening = threading.Event()
        self._work_ready = asyncio.Event()
        self._rescan_reset = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="inspect")
        http = grpc_health = watcher = None
        tasks: list[asyncio.Task[None]] = []
        try:
            if self.config.health_port:
                http = HealthHttpServer(
                    self.health, self.config.health_address, self.config.health_port
                )
                http.start()
                self.http_port = http.port
            if self.config.grpc_health_port:
                grpc_health = HealthGrpcServer(
                    self.health, self.config.health_address, self.config.grpc_health_port
                )
                await grpc_health.start()
                self.grpc_health_port = grpc_health.port
            watcher = self._start_watcher(loop)
            log.info(
                "agent started",
                extra={
                    "coordinator": self.config.transport.describe(),
                    "hostRoot": str(self.config.host_root),
                    "healthPort": self.http_port or 0,
                    "grpcHealthPort": self.grpc_health_port or 0,
                    "udev": watcher is not None,
                },
            )
            self.pending.add_local()
            self._work_ready.set()
            self.listening.set()
            tasks = [
                asyncio.create_task(self._worker(loop, executor), name="worker"),
                asyncio.create_task(self._rescan_timer(), name="rescan"),
                asyncio.create_task(self.link.run(), name="connect"),
            ]
            await stop.wait()
            log.info("stopping")
        finally:
            # The connect loop first: it half-closes and cancels the stream.
            self.link.stopping = True
            for task in reversed(tasks):
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception:
                    log.exception("error while stopping", extra={"task": task.get_name()})
            if self._deferred_change is not None:
                self._deferred_change.cancel()
            if watcher is not None:
                watcher.stop()
            if grpc_health is not None:
                await grpc_health.stop()
            if http is not None:
                http.stop()
            executor.shutdown(wait=False, cancel_futures=True)
        log.info("stopped")

    def _start_watcher(self, loop: asyncio.AbstractEventLoop) -> UeventWatcher | None:
        if self._event_source is None:
            return None
        try:
            source = self._event_source()
        except OSError as error:
            log.warning(
                "cannot listen to kernel uevents; changes are seen by the periodic rescan "
                "only (the pod needs hostNetwork: uevents are per network namespace)",
                extra={"error": str(error)},
            )
            return None
        warning = network_namespace_warning(OWN_NETWORK_NAMESPACE, self.config.host_root)
        if warning:
            log.warning(warning)
        watcher = UeventWatcher(
            loop,
            source,
            Debouncer(self.config.debounce_quiet, self.config.debounce_max),
            lambda: self._add_change(DEVICE_EVENT),
        )
        watcher.start()
        return watcher

    # -- triggers ----------------------------------------------------------------------------

    def _add_change(self, trigger: Trigger) -> None:
        self.pending.add_change(trigger)
        self._work_ready.set()

    def _on_session(self, session: Session) -> None:
        """A stream was welcomed: take its intervals, owe it a CONNECTED report."""
        self._apply_intervals(session, session.intervals)
        self.pending.add_connected(session.generation)
        self._work_ready.set()

    async def _on_inspect_request(self, message: api.CoordinatorMessage) -> None:
        session = self.link.session
        if session is None:
            return
        log.info("inspection requested", extra={"requestId": message.inspect.request_id})
        self.pending.add_request(session.generation, message.inspect.request_id)
        self._work_ready.set()

    async def _on_node_action_request(self, message: api.CoordinatorMessage) -> None:
        session = self.link.session
        if session is None:
            return
        kind, request_id = message.WhichOneof("body"), request_id_of(message)
        if not request_id:
            # An answer could not be matched, and the coordinator closes a stream that sends
            # one without an id: say so here and change nothing.
            log.warning(NO_REQUEST_ID, extra={"kind": kind})
            return
        log.info("node change requested", extra={"kind": kind, "requestId": request_id})
        self._node_action_jobs.append(NodeActionJob(session.generation, message))
        self._work_ready.set()

    async def _on_welcome(self, message: api.CoordinatorMessage) -> None:
        """A Welcome after the first one: the coordinator changed its mind on intervals."""
        session = self.link.session
        if session is not None:
            self._apply_intervals(session, self.link.intervals(message.welcome))

    def _apply_intervals(self, session: Session, intervals: Intervals) -> None:
        session.apply(intervals)
        if intervals.rescan != self.rescan_interval:
            self.rescan_interval = intervals.rescan
            self.health.set_stale_after(self.config.stale_after(intervals.rescan))
            self._rescan_reset.set()

    async def _rescan_timer(self) -> None:
        while True:
            self._rescan_reset.clear()
            try:
                # asyncio.timeout, not wait_for: see agent.daemon.link.CLOSE_TIMEOUT.
                async with asyncio.timeout(self.rescan_interval):
                    await self._rescan_reset.wait()
            except TimeoutError:
                self._add_change(RESCAN)

    # -- inspection and delivery -------------------------------------------------------------

    async def _worker(
        self, loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor
    ) -> None:
        while True:
            await self._work_ready.wait()
            self._work_ready.clear()
            while self._node_action_jobs:
                await self._run_node_action(loop, executor, self._node_action_jobs.popleft())
            batch = self.pending.take()
            if batch is None:
                continue
            try:
                report = await loop.run_in_executor(executor, self._inspect, self._wall_clock())
            except HostRootError as error:
                self.health.inspection_failed(f"{error.host_root}: {error.problem}")
                log.error("inspection failed: bad host root", extra={"error": str(error)})
                continue
            except Exception as error:
                self.health.inspection_failed(f"{type(error).__name__}: {error}")
                log.exception("inspection failed")
                continue
            self.health.inspection_succeeded()
            session = self.link.session
            if session is None:
                continue
            try:
                await self._deliver(
                    session, report, batch.change, batch.requests_for(session.generation)
                )
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
                # The stream is ending; the connect loop says why.
                log.debug("report not sent: stream closing", extra={"error": str(error)})
            except Exception:
                # Never let one bad send end the worker: inspections (and health) go on.
                log.exception("report not sent")

    def _stream_open(self, generation: int) -> bool:
        session = self.link.session
        return session is not None and session.generation == generation

    async def _run_node_action(
        self,
        loop: asyncio.AbstractEventLoop,
        executor: concurrent.futures.Executor,
        job: NodeActionJob,
    ) -> None:
        """Run one prepare/restore on the worker's thread and answer it on its stream."""
        if not self._stream_open(job.generation):
            # Its answer could not be delivered: change nothing; the coordinator asks again.
            log.warning(
                "node change request dropped: its stream closed before it ran",
                extra={"requestId": request_id_of(job.message)},
            )
            return
        answer = await loop.run_in_executor(executor, self.node_actions.answer, job.message)
        fields = describe_answer(answer)
        # The node may have changed: the next inspection reports it (if it did).
        self._add_change(DEVICE_EVENT)
        session = self.link.session
        if session is None or session.generation != job.generation:
            log.warning("answer not sent: the stream the request came on has closed", extra=fields)
            return
        try:
            await session.send_answer(answer)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
            log.warning("answer not sent: stream closing", extra={**fields, "error": str(error)})
            return
        except Exception:
            log.exception("answer not sent", extra=fields)
            return
        log.info("answer sent", extra={**fields, "kind": answer.WhichOneof("body")})

    async def _deliver(
        self,
        session: Session,
        report: pb.NodeReport,
        change: Trigger | None,
        request_ids: list[str],
    ) -> None:
        sent: list[str] = []
        if session.sequence == 0:
            # The first report of every stream, whatever else asked for this inspection.
            await session.send_report(report, api.ReportUpdate.CONNECTED)
            sent.append("CONNECTED")
        for request_id in request_ids:
            await session.send_report(report, api.ReportUpdate.REQUESTED, request_id)
            sent.append("REQUESTED")
        if change is not None and not sent:
            await self._send_if_changed(session, report, change)
        elif sent:
            log.info(
                "report sent",
                extra={"triggers": ",".join(sent), "sequence": session.sequence},
            )

    async def _send_if_changed(
        self, session: Session, report: pb.NodeReport, change: Trigger
    ) -> None:
        if not report_changed(session.last_sent, report):
            return
        wait = session.rate.wait_before_send(self._monotonic())
        if wait > 0:
            if self._deferred_change is None:
                log.info("change held back by the report rate", extra={"retryIn": round(wait, 3)})
                self._deferred_change = asyncio.get_running_loop().call_later(
                    wait, self._deferred_change_due, change
                )
            return
        sequence = await session.send_report(report, change)
        log.info(
            "report sent",
            extra={"triggers": api.ReportUpdate.Trigger.Name(change), "sequence": sequence},
        )

    def _deferred_change_due(self, change: Trigger) -> None:
        self._deferred_change = None
        self._add_change(change)
