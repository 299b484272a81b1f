"""AgentService.Connect: one node's agent stream, from token to last message.

Per stream: the bearer token is reviewed (our audience, the agent's ServiceAccount, the node
it is bound to); the first message must be a Hello naming that node; the Welcome tells the
agent the heartbeat and rescan intervals and the report rate limit; then reports, heartbeats
and answers to InspectRequests flow until the agent hangs up or a newer stream for the node
replaces this one. Requests arrive as raw bytes and are parsed here, so garbage ends only its
own stream, with a status that says what was wrong:

- UNAUTHENTICATED: no token, or a token the API server rejects for our audience;
- PERMISSION_DENIED: another ServiceAccount's token, or a Hello/report naming another node;
- INVALID_ARGUMENT: bytes that are not an AgentMessage, a first message that is not Hello,
  absurd values (coordinator/live_nodes/streams/limits.py), sequences that go backwards;
- RESOURCE_EXHAUSTED: far more messages than any agent sends;
- ABORTED: replaced by a newer stream of the same node;
- UNAVAILABLE: the API server could not review the token (the agent retries).

Reports beyond the rate limit are dropped (answers to our own requests never are); the node
is then not fresh until the agent's next report gets through, which the coordinator asks for
as soon as the limit allows.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import DecodeError

from coordinator.live_nodes.access.identity import (
    RefusalError,
    agent_node,
    bearer_token,
    check_claimed_node,
    require_token,
)
from coordinator.live_nodes.access.node_scope import NodeScope
from coordinator.live_nodes.access.token_review import ReviewUnavailableError, TokenReviewer
from coordinator.live_nodes.streams.limits import (
    InvalidMessageError,
    Limits,
    check_call_result,
    check_hello,
    check_report_update,
)
from coordinator.live_nodes.streams.ratelimit import TokenBucket
from coordinator.live_nodes.streams.registry import Registry
from coordinator.live_nodes.streams.sessions import AgentSession, CallResult, Pending, Sessions
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb

log = logging.getLogger(__name__)

SERVICE = "gpuctl.api.v1alpha1.AgentService"
Context = grpc.aio.ServicerContext[bytes, agent_pb.CoordinatorMessage]
# How often a stream waiting for the pool's Nodes to be listed looks again.
SCOPE_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class AgentServiceConfig:
    audience: str
    agent_username: str
    heartbeat_seconds: float = 10.0
    rescan_seconds: float = 60.0
    max_reports_per_minute: int = 60
    hello_timeout_seconds: float = 10.0
    limits: Limits = field(default_factory=Limits)

    @property
    def report_burst(self) -> int:
        return max(1, min(self.max_reports_per_minute, 10))

    @property
    def max_messages_per_minute(self) -> float:
        """Every message counts here: generous for heartbeats plus reports, small for floods."""
        return 10 * (self.max_reports_per_minute + 60.0 / self.heartbeat_seconds) + 60


def _parse(raw: bytes) -> agent_pb.AgentMessage:
    try:
        return agent_pb.AgentMessage.FromString(raw)
    except (DecodeError, TypeError) as err:
        raise RefusalError(
            grpc.StatusCode.INVALID_ARGUMENT, f"malformed AgentMessage ({len(raw)} bytes): {err}"
        ) from None


def _welcome(config: AgentServiceConfig) -> agent_pb.CoordinatorMessage:
    welcome = agent_pb.Welcome(max_reports_per_minute=config.max_reports_per_minute)
    welcome.heartbeat_interval.FromNanoseconds(int(config.heartbeat_seconds * 1e9))
    welcome.rescan_interval.FromNanoseconds(int(config.rescan_seconds * 1e9))
    return agent_pb.CoordinatorMessage(welcome=welcome)


class AgentService:
    """The Connect handler; one instance serves every stream."""

    def __init__(
        self,
        config: AgentServiceConfig,
        *,
        reviewer: TokenReviewer,
        registry: Registry,
        sessions: Sessions,
        monotonic: Callable[[], float],
        scope: NodeScope | None = None,
    ) -> None:
        self._config = config
        # The Nodes served (None: every Node); other nodes' agents are refused.
        self._scope = scope
        self._reviewer = reviewer
        self._registry = registry
        self._sessions = sessions
        self._monotonic = monotonic
        # Figures for metrics (read from other threads; plain counts, updated on the loop).
        self.refused: collections.Counter[str] = collections.Counter()
        self.dropped_reports = 0

    def handler(self) -> grpc.GenericRpcHandler:
        connect: grpc.RpcMethodHandler[bytes, agent_pb.CoordinatorMessage]
        connect = grpc.stream_stream_rpc_method_handler(
            self.connect,
            request_deserializer=None,  # raw bytes: parsed in _parse, refused precisely
            response_serializer=agent_pb.CoordinatorMessage.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE, {"Connect": connect})

    async def _token_node(self, context: Context) -> str:
        token = require_token(bearer_token(context.invocation_metadata()))
        audiences = (self._config.audience,)
        try:
            reviewed = self._reviewer.cached(token, audiences)
            if reviewed is None:
                reviewed = await asyncio.to_thread(self._reviewer.review, token, audiences)
        except ReviewUnavailableError as err:
            raise RefusalError(grpc.StatusCode.UNAVAILABLE, str(err)) from None
        return agent_node(reviewed, self._config.agent_username, self._config.audience)

    async def _hello(self, requests: AsyncIterator[bytes]) -> agent_pb.Hello:
        try:
            raw = await asyncio.wait_for(anext(requests), self._config.hello_timeout_seconds)
        except StopAsyncIteration:
            raise RefusalError(
                grpc.StatusCode.INVALID_ARGUMENT, "stream ended before Hello"
            ) from None
        except TimeoutError:
            raise RefusalError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no Hello within {self._config.hello_timeout_seconds:g}s",
            ) from None
        message = _parse(raw)
        if message.WhichOneof("body") != "hello":
            raise RefusalError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the first message must be Hello, not {message.WhichOneof('body') or 'empty'}",
            )
        try:
            check_hello(message.hello)
        except InvalidMessageError as err:
            raise RefusalError(grpc.StatusCode.INVALID_ARGUMENT, f"bad Hello: {err}") from None
        return message.hello

    async def _check_scope(self, node: str) -> None:
        """Refuses another pool's agent. While this coordinator's pool is still being listed
        (just after it started leading, when every agent reconnects at once) the stream waits
        for the answer, up to the Hello timeout, rather than sending them all away to come back."""
        if self._scope is None:
            return
        deadline = self._monotonic() + self._config.hello_timeout_seconds
        while self._scope.contains(node) is None and self._monotonic() < deadline:
            await asyncio.sleep(SCOPE_POLL_SECONDS)
        self._scope.check(node)

    async def connect(self, requests: AsyncIterator[bytes], context: Context) -> None:
        peer = context.peer()
        node = ""
        try:
            node = await self._token_node(context)
            hello = await self._hello(requests)
            check_claimed_node(node, hello.node_name)
            await self._check_scope(node)
        except RefusalError as refused:
            self.refused[refused.code.name] += 1
            log.warning(
                "agent stream refused",
                extra={
                    "peer": peer,
                    "token_node": node,
                    "code": refused.code.name,
                    "reason": refused.message,
                },
            )
            await context.abort(refused.code, refused.message)
        session = AgentSession(
            node,
            report_bucket=TokenBucket(
                self._config.max_reports_per_minute, self._config.report_burst, self._monotonic
            ),
            message_bucket=TokenBucket(
                self._config.max_messages_per_minute,
                self._config.max_messages_per_minute / 6,
                self._monotonic,
            ),
        )
        self._sessions.open(session)
        self._registry.connected(node, session.stream_id, hello.agent_version, hello.boot_id)
        log.info(
            "agent connected",
            extra={"node": node, "peer": peer, "agent_version": hello.agent_version},
        )
        refusal: RefusalError | None = None
        try:
            await context.write(_welcome(self._config))
            refusal = await self._serve(session, requests, context)
        finally:
            self._sessions.close(session)
            self._registry.disconnected(node, session.stream_id)
            log.info(
                "agent disconnected",
                extra={"node": node, "reason": refusal.message if refusal else "stream ended"},
            )
        if refusal is not None:
            await context.abort(refusal.code, refusal.message)

    async def _serve(
        self, session: AgentSession, requests: AsyncIterator[bytes], context: Context
    ) -> RefusalError | None:
        """Read and write until either side ends; the refusal to end the stream with, if any."""
        reader = asyncio.create_task(self._read_all(session, requests))
        writer = asyncio.create_task(self._write_all(session, context))
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
        finished = done.pop()
        if finished.cancelled():
            return None
        error = finished.exception()
        if error is not None:  # the peer went away mid-write or mid-read: nothing to refuse
            log.info("agent stream broke", extra={"node": session.node, "error": repr(error)})
            return None
        return finished.result()

    async def _write_all(self, session: AgentSession, context: Context) -> RefusalError:
        while True:
            item = await session.outbox.get()
            if isinstance(item, RefusalError):
                return item
            await context.write(item)

    async def _read_all(
        self, session: AgentSession, requests: AsyncIterator[bytes]
    ) -> RefusalError | None:
        try:
            async for raw in requests:
                self._receive(session, _parse(raw))
        except RefusalError as bad_input:
            self.refused[bad_input.code.name] += 1
            log.warning(
                "agent stream closed for bad input",
                extra={
                    "node": session.node,
                    "code": bad_input.code.name,
                    "reason": bad_input.message,
                },
            )
            return bad_input
        return None

    def _receive(self, session: AgentSession, message: agent_pb.AgentMessage) -> None:
        kind = message.WhichOneof("body")
        answered = (
            kind == "report"
            and message.report.trigger == agent_pb.ReportUpdate.REQUESTED
            and message.report.request_id in session.pending
        ) or (
            kind in ("prepare_result", "restore_result")
            and getattr(message, kind).request_id in session.calls
        )
        if not answered and not session.message_bucket.take():
            raise RefusalError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"more than {self._config.max_messages_per_minute:g} messages per minute",
            )
        if kind == "report":
            self._report(session, message.report)
        elif kind == "heartbeat":
            self._heartbeat(session, message.heartbeat)
        elif kind in ("prepare_result", "restore_result"):
            self._call_result(session, getattr(message, kind), kind)
        elif kind == "hello":
            raise RefusalError(grpc.StatusCode.INVALID_ARGUMENT, "Hello is only the first message")
        else:
            raise RefusalError(grpc.StatusCode.INVALID_ARGUMENT, "empty AgentMessage")

    def _report(self, session: AgentSession, update: agent_pb.ReportUpdate) -> None:
        try:
            check_report_update(update, self._config.limits)
        except InvalidMessageError as err:
            raise RefusalError(
                grpc.StatusCode.INVALID_ARGUMENT, f"bad ReportUpdate: {err}"
            ) from None
        check_claimed_node(session.node, update.report.node_name)
        if update.sequence <= session.last_sequence:
            raise RefusalError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"report sequence {update.sequence} after {session.last_sequence}: "
                "sequences only grow on a stream",
            )
        session.last_sequence = update.sequence
        pending = None
        if update.trigger == agent_pb.ReportUpdate.REQUESTED:
            pending = session.pending.pop(update.request_id, None)
        if pending is None and not session.report_bucket.take():
            session.dropped_reports += 1
            self.dropped_reports += 1
            self._registry.dropped(session.node, session.stream_id)
            if session.dropped_reports == 1 or session.dropped_reports % 100 == 0:
                log.warning(
                    "agent report dropped: rate limit",
                    extra={"node": session.node, "dropped": session.dropped_reports},
                )
            return
        if pending is not None and pending.future is None:
            session.resync_pending = False
        answers = update.request_id if pending is not None and pending.gpunode_request else None
        self._registry.reported(
            session.node, session.stream_id, update.report, update.sequence, answers
        )
        if pending is not None and pending.future is not None and not pending.future.done():
            pending.future.set_result(update.report)

    def _call_result(self, session: AgentSession, result: CallResult, kind: str) -> None:
        try:
            check_call_result(result, kind, self._config.limits)
        except InvalidMessageError as err:
            raise RefusalError(grpc.StatusCode.INVALID_ARGUMENT, f"bad {kind}: {err}") from None
        if result.HasField("report"):
            check_claimed_node(session.node, result.report.node_name)
        if not session.answered(result):
            log.info(
                "late or unknown call result ignored",
                extra={"node": session.node, "kind": kind, "request_id": result.request_id},
            )

    def _heartbeat(self, session: AgentSession, heartbeat: agent_pb.Heartbeat) -> None:
        in_sync = self._registry.heard(session.node, session.stream_id, heartbeat.last_sequence)
        if in_sync or heartbeat.last_sequence == 0 or session.resync_pending:
            return
        if not session.report_bucket.available():
            return  # ask once the limit allows; until then the node is not fresh
        # The agent has a report we did not accept: ask for it (answers are exempt).
        session.resync_pending = True
        request_id = f"resync-{heartbeat.last_sequence}"
        session.pending[request_id] = Pending(None)
        session.send_inspect(request_id)
