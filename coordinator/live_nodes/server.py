"""The coordinator's gRPC server: AgentService + NodeService on one grpc.aio server.

grpc.aio serves thousands of long-lived streams from one event loop instead of one thread per
stream. The loop runs in its own thread (`AgentServer.start`); the rest of the coordinator is
threaded and talks to it only through the thread-safe Registry and `request_report`, which
schedules an inspect request onto the loop and returns a concurrent Future.

Transport: TLS on every connection (`TlsFiles`, re-read when the files change:
coordinator/live_nodes/tls/tls_reload.py), or plaintext only when explicitly asked for
(`insecure=True`, local runs). Limits: the maximum message size both ways, keepalive pings so dead
peers are noticed, and the per-stream limits of coordinator/live_nodes/streams/agent_service.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import grpc

from coordinator.health import NO_HEARTBEAT, Heartbeat
from coordinator.kube.client import KubeApi
from coordinator.live_nodes.access.access_review import AccessReviewer
from coordinator.live_nodes.access.node_scope import NodeScope
from coordinator.live_nodes.access.token_review import TokenReviewer
from coordinator.live_nodes.streams.agent_service import AgentService, AgentServiceConfig
from coordinator.live_nodes.streams.node_service import NodeService
from coordinator.live_nodes.streams.registry import Registry
from coordinator.live_nodes.streams.sessions import CallResult, Sessions
from coordinator.live_nodes.tls.managed_tls import ManagedTls, ManagedTlsConfig
from coordinator.live_nodes.tls.tls_reload import MemoryCertificate, ReloadingCertificate
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
_Request = TypeVar("_Request", agent_pb.PrepareRequest, agent_pb.RestoreRequest)


def _with_id(request: _Request) -> _Request:
    if request.request_id:
        return request
    named = type(request)()
    named.CopyFrom(request)
    named.request_id = f"rq-{uuid.uuid4().hex}"
    return named


@dataclass(frozen=True)
class TlsFiles:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class ServerConfig:
    agents: AgentServiceConfig
    host: str = "0.0.0.0"  # noqa: S104 - a server for agents on every node
    port: int = 9443
    tls: TlsFiles | None = None
    # The coordinator's own certificate in a Secret (made and renewed by the leader).
    managed_tls: ManagedTlsConfig | None = None
    insecure: bool = False
    report_freshness_seconds: float = 30.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_concurrent_rpcs: int | None = None

    def __post_init__(self) -> None:
        if self.tls is None and self.managed_tls is None and not self.insecure:
            raise ValueError(
                "the gRPC server needs TLS files or a TLS Secret, or insecure=True for local runs"
            )


def _options(config: ServerConfig) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
    ]


EVENT_LOOP_BEAT_SECONDS = 1.0


class AgentServer:
    """Owns the event-loop thread, the gRPC server and the sessions it serves."""

    def __init__(
        self,
        kube: KubeApi,
        config: ServerConfig,
        registry: Registry,
        *,
        heartbeat: Heartbeat = NO_HEARTBEAT,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], datetime],
        epoch_clock: Callable[[], float],
        scope: NodeScope | None = None,
    ) -> None:
        self._config = config
        self._monotonic = monotonic
        self._heartbeat = heartbeat
        self.certificate: ReloadingCertificate | MemoryCertificate | None = None
        self.managed_tls = (
            ManagedTls(kube, config.managed_tls, wall_clock) if config.managed_tls else None
        )
        self.registry = registry
        self.sessions = Sessions()
        self.reviewer = TokenReviewer(kube, wall_clock=epoch_clock)
        self.agent_service = AgentService(
            config.agents,
            reviewer=self.reviewer,
            registry=registry,
            sessions=self.sessions,
            monotonic=monotonic,
            scope=scope,
        )
        self._node_service = NodeService(
            reviewer=self.reviewer,
            access=AccessReviewer(kube, monotonic=monotonic),
            registry=registry,
            sessions=self.sessions,
            bound_seconds=config.report_freshness_seconds,
            monotonic=monotonic,
            wall_clock=wall_clock,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0

    def _credentials_port(self, server: grpc.aio.Server) -> int:
        address = f"{self._config.host}:{self._config.port}"
        if self.managed_tls is not None:
            pem = self.managed_tls.ensure()  # the leader makes or renews it first
            self.certificate = MemoryCertificate(pem.key, pem.cert)
            return server.add_secure_port(address, self.certificate.credentials())
        if self._config.tls is None:
            return server.add_insecure_port(address)
        self.certificate = ReloadingCertificate(
            self._config.tls.cert_file, self._config.tls.key_file, monotonic=self._monotonic
        )
        return server.add_secure_port(address, self.certificate.credentials())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = grpc.aio.server(
            options=_options(self._config),
            maximum_concurrent_rpcs=self._config.max_concurrent_rpcs,
        )
        server.add_generic_rpc_handlers(
            (self.agent_service.handler(), self._node_service.handler())
        )
        try:
            self.port = self._credentials_port(server)
            if self.port == 0:
                raise OSError(f"cannot listen on {self._config.host}:{self._config.port}")
            await server.start()
        except BaseException as err:
            self._error = err
            self._ready.set()
            raise
        log.info(
            "gRPC server listening",
            extra={"port": self.port, "tls": not self._config.insecure},
        )
        self._ready.set()
        beats = asyncio.create_task(self._beat())
        renewals = asyncio.create_task(self._renew())
        await self._stopping.wait()
        beats.cancel()
        renewals.cancel()
        self._heartbeat.rest()
        await server.stop(grace=2.0)

    async def _renew(self) -> None:
        """With a managed certificate: check it every check_seconds, serve the renewed one."""
        managed, certificate = self.managed_tls, self.certificate
        if managed is None or not isinstance(certificate, MemoryCertificate):
            return
        while True:
            await asyncio.sleep(managed.config.check_seconds)
            try:
                pem = await asyncio.to_thread(managed.ensure)
            except Exception:
                log.exception("TLS certificate check failed; serving the current one")
                continue
            certificate.replace(pem.key, pem.cert)

    async def _beat(self) -> None:
        """Beat once a second from the event loop: a blocked loop stops beating."""
        while True:
            self._heartbeat.beat()
            await asyncio.sleep(EVENT_LOOP_BEAT_SECONDS)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as err:
            if self._error is None:
                log.exception("gRPC server failed")
                self._error = err
        finally:
            self._ready.set()

    def start(self, timeout: float = 30.0) -> None:
        """Start serving; returns once listening (raises if it could not)."""
        self._thread = threading.Thread(target=self._run, name="grpc-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the gRPC server did not start")
        if self._error is not None:
            raise RuntimeError(f"the gRPC server did not start: {self._error}") from self._error

    def stop(self, timeout: float = 10.0) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def request_report(
        self, node: str, timeout: float, gpunode_request_id: str | None = None
    ) -> concurrent.futures.Future[report_pb.NodeReport]:
        """Ask `node`'s agent for a fresh report, from any thread.

        The Future fails with sessions.NotConnectedError, TimeoutError, or TooManyRequestsError.
        """
        if self._loop is None:
            raise RuntimeError("the gRPC server is not running")
        return asyncio.run_coroutine_threadsafe(
            self.sessions.inspect(node, timeout, gpunode_request_id), self._loop
        )

    def _call(
        self, node: str, message: agent_pb.CoordinatorMessage, request_id: str, timeout: float
    ) -> concurrent.futures.Future[CallResult]:
        if self._loop is None:
            raise RuntimeError("the gRPC server is not running")
        return asyncio.run_coroutine_threadsafe(
            self.sessions.call(node, message, request_id, timeout), self._loop
        )

    def request_prepare(
        self, node: str, request: agent_pb.PrepareRequest, timeout: float
    ) -> concurrent.futures.Future[agent_pb.PrepareResult]:
        """Ask `node`'s agent to prepare for an unload, from any thread (a request without an
        id gets one). Fails like request_report."""
        request = _with_id(request)
        message = agent_pb.CoordinatorMessage(prepare=request)
        return self._call(node, message, request.request_id, timeout)  # type: ignore[return-value]

    def request_restore(
        self, node: str, request: agent_pb.RestoreRequest, timeout: float
    ) -> concurrent.futures.Future[agent_pb.RestoreResult]:
        """Ask `node`'s agent to undo a preparation, from any thread. Fails like request_report."""
        request = _with_id(request)
        message = agent_pb.CoordinatorMessage(restore=request)
        return self._call(node, message, request.request_id, timeout)  # type: ignore[return-value]

    def connected_nodes(self) -> int:
        """How many nodes have an open stream (approximate when read from another thread)."""
        return len(self.sessions)
