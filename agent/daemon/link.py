"""The agent's side of the stream: connect, Hello, Welcome, serve, and reconnect forever.

One `CoordinatorLink.run()` loop: read the token file (again on every attempt: kubelet
rotates it), dial, send Hello, wait for Welcome, then hold the Session while reading the
coordinator's messages into the request dispatch and heartbeating in silences. When the
stream ends or an attempt fails, the reason is logged in plain words
(gpuctl.rpc.grpc_errors) and the next attempt waits a full-jitter backoff; a stream that
got as far as Welcome resets the backoff. What to do with a session (send the CONNECTED
report, apply its intervals) is the owner's business, through `on_session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from agent.daemon.config import DaemonConfig
from agent.daemon.dispatch import RequestDispatch
from agent.daemon.health import HealthState
from agent.daemon.session import AgentCall, Intervals, Session, intervals_from_welcome
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import agent_service_pb2_grpc as api_grpc
from gpuctl.rpc.grpc_client import (
    ClientConfigError,
    bearer_metadata,
    open_aio_channel,
    read_token_file,
)
from gpuctl.rpc.grpc_errors import describe_rpc_failure

log = logging.getLogger("agent.daemon")

BOOT_ID = "proc/sys/kernel/random/boot_id"
CLOSE_TIMEOUT = 2.0
# Timeouts use `asyncio.timeout`, never `asyncio.wait_for`: on Python 3.11, wait_for loses
# a cancellation that lands as the awaited call completes (CPython gh-86296), and a lost
# cancellation is an agent that ignores SIGTERM.


def read_boot_id(host_root: Path) -> str:
    """The host's boot id, or "" when it cannot be read (the coordinator then cannot tell
    a reboot from a reconnect, which it must treat as unknown)."""
    try:
        return (host_root / BOOT_ID).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


@dataclass(frozen=True)
class SessionEnd:
    welcomed: bool
    reason: str


@dataclass
class _Progress:
    welcomed: bool = False


class CoordinatorLink:
    def __init__(
        self,
        config: DaemonConfig,
        *,
        agent_version: str,
        dispatch: RequestDispatch,
        health: HealthState,
        on_session: Callable[[Session], None],
        uniform: Callable[[float, float], float],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._agent_version = agent_version
        self._dispatch = dispatch
        self._health = health
        self._on_session = on_session
        self._uniform = uniform
        self._monotonic = monotonic
        # The open, welcomed stream; None between streams.
        self.session: Session | None = None
        self._generation = 0
        self.stopping = False

    def intervals(self, welcome: api.Welcome) -> Intervals:
        return intervals_from_welcome(
            welcome,
            default_heartbeat=self.config.default_heartbeat_interval,
            default_rescan=self.config.default_rescan_interval,
        )

    async def run(self) -> None:
        """Connect and reconnect until cancelled (cancelling closes the stream). `stopping`
        also ends the loop, should a library swallow the cancellation."""
        attempt = 0
        while not self.stopping:
            end = await self._one_session()
            if self.stopping:
                return
            self._health.connection(False, end.reason)
            if end.welcomed:
                attempt = 0
            delay = self.config.backoff.delay(attempt, self._uniform)
            log.warning(
                "not connected to the coordinator",
                extra={"reason": end.reason, "attempt": attempt + 1, "retryIn": round(delay, 3)},
            )
            attempt += 1
            await asyncio.sleep(delay)

    async def _one_session(self) -> SessionEnd:
        try:
            token = read_token_file(self.config.token_file)
            channel = open_aio_channel(self.config.transport)
        except ClientConfigError as error:
            return SessionEnd(False, str(error))
        call = api_grpc.AgentServiceStub(channel).Connect(metadata=bearer_metadata(token))
        progress = _Progress()
        try:
            return await self._converse(call, progress)
        except grpc.aio.AioRpcError as error:
            code, details = error.code(), error.details() or ""
            if progress.welcomed:
                return SessionEnd(True, f"stream ended: {code.name}: {details}")
            return SessionEnd(False, describe_rpc_failure(code, details))
        except TimeoutError:
            return SessionEnd(
                False, f"no Welcome within {self.config.welcome_timeout:g}s after Hello"
            )
        finally:
            self.session = None
            await self._close_call(call)
            await channel.close()

    async def _converse(self, call: AgentCall, progress: _Progress) -> SessionEnd:
        """Hello, Welcome, then serve the stream until it ends."""
        hello = api.Hello(
            node_name=self.config.node_name,
            agent_version=self._agent_version,
            boot_id=read_boot_id(self.config.host_root),
        )
        await call.write(api.AgentMessage(hello=hello))
        async with asyncio.timeout(self.config.welcome_timeout):
            first = await call.read()
        if not isinstance(first, api.CoordinatorMessage):
            return SessionEnd(False, await self._describe_end(call, welcomed=False))
        kind = first.WhichOneof("body")
        if kind != "welcome":
            return SessionEnd(
                False,
                f"protocol error: the coordinator answered Hello with "
                f"{kind or 'an empty message'}, not Welcome",
            )
        progress.welcomed = True
        await self._serve_session(call, first.welcome)
        return SessionEnd(True, await self._describe_end(call, welcomed=True))

    async def _serve_session(self, call: AgentCall, welcome: api.Welcome) -> None:
        self._generation += 1
        session = Session(self._generation, call, self.intervals(welcome), self._monotonic)
        self.session = session
        self._health.connection(True)
        log.info(
            "connected to the coordinator",
            extra={
                "heartbeatSeconds": session.intervals.heartbeat,
                "rescanSeconds": session.intervals.rescan,
                "maxReportsPerMinute": session.intervals.max_reports_per_minute,
            },
        )
        self._on_session(session)
        heartbeats = asyncio.create_task(self._heartbeats(session), name="heartbeat")
        try:
            while True:
                message = await call.read()
                if not isinstance(message, api.CoordinatorMessage):
                    return  # end of stream
                await self._dispatch.dispatch(message)
        finally:
            heartbeats.cancel()
            self.session = None

    async def _heartbeats(self, session: Session) -> None:
        try:
            while True:
                delay = session.last_write + session.intervals.heartbeat - self._monotonic()
                if delay > 0:
                    session.intervals_changed.clear()
                    # Wake early when a later Welcome changes the interval.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await session.intervals_changed.wait()
                    continue
                await session.send_heartbeat()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            return

    async def _describe_end(
        self,
        call: AgentCall,
        *,
        welcomed: bool,
    ) -> str:
        code = await call.code()
        details = await call.details() or ""
        if code is grpc.StatusCode.OK:
            return "the coordinator closed the stream"
        if welcomed:
            return f"stream ended: {code.name}: {details}"
        return describe_rpc_failure(code, details)

    async def _close_call(self, call: AgentCall) -> None:
        """Half-close (the coordinator sees a clean end of stream), then cancel."""
        if not call.done():
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await call.done_writing()
            except Exception as error:  # closing is best effort
                # grpc raises its internal ExecuteBatchError when the call failed already.
                log.debug("half-close failed", extra={"error": repr(error)})
            call.cancel()
