"""NodeService: the direct read API over the sessions, for callers RBAC lets see GPUNodes.

Every call needs a bearer token the API server accepts for its own audience (TokenReview) and
a SubjectAccessReview allowing `list` (ListNodes) or `get` on that node (GetNode) on
gpunodes.gpuctl.dev. Anyone else gets UNAUTHENTICATED or PERMISSION_DENIED and no data.
GetNode answers NOT_FOUND for a node no agent reported for since this coordinator started;
with `fresh` it asks the agent and waits up to `timeout` (default 10 s, at most 60 s):
DEADLINE_EXCEEDED when the agent does not answer in time, UNAVAILABLE when it is not
connected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

import grpc
from google.protobuf.message import DecodeError, Message

from coordinator.live_nodes.access.access_review import AccessReviewer, AccessReviewUnavailableError
from coordinator.live_nodes.access.identity import (
    RefusalError,
    Reviewed,
    bearer_token,
    require_token,
)
from coordinator.live_nodes.access.token_review import ReviewUnavailableError, TokenReviewer
from coordinator.live_nodes.streams.freshness import is_fresh
from coordinator.live_nodes.streams.limits import InvalidMessageError, check_node_name
from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from coordinator.live_nodes.streams.registry import Registry
from coordinator.live_nodes.streams.sessions import (
    NotConnectedError,
    Sessions,
    TooManyRequestsError,
)
from gpuctl.api.v1alpha1 import node_service_pb2 as node_pb

log = logging.getLogger(__name__)

SERVICE = "gpuctl.api.v1alpha1.NodeService"
DEFAULT_FRESH_TIMEOUT = 10.0
MAX_FRESH_TIMEOUT = 60.0
Context = grpc.aio.ServicerContext[bytes, Message]

_SESSION = {
    Session.CONNECTED: node_pb.NodeState.CONNECTED,
    Session.DISCONNECTED: node_pb.NodeState.DISCONNECTED,
}


def node_state(
    record: NodeRecord, now: float, wall_now: datetime, bound_seconds: float
) -> node_pb.NodeState:
    state = node_pb.NodeState(
        node_name=record.node,
        session=_SESSION[record.session],
        fresh=is_fresh(record, now, bound_seconds),
        agent_version=record.agent_version,
    )
    if record.report is not None:
        state.report.CopyFrom(record.report)
    if record.report_received_at is not None:
        state.received_at.FromDatetime(record.report_received_at)
        age = max(0.0, (wall_now - record.report_received_at).total_seconds())
        state.age.FromNanoseconds(int(age * 1e9))
    return state


def fresh_timeout(request: node_pb.GetNodeRequest) -> float:
    if not request.HasField("timeout"):
        return DEFAULT_FRESH_TIMEOUT
    seconds = request.timeout.ToNanoseconds() / 1e9
    if seconds <= 0:
        raise RefusalError(grpc.StatusCode.INVALID_ARGUMENT, "timeout must be positive")
    return min(seconds, MAX_FRESH_TIMEOUT)


class NodeService:
    """ListNodes and GetNode over the registry, behind TokenReview + SubjectAccessReview."""

    def __init__(
        self,
        *,
        reviewer: TokenReviewer,
        access: AccessReviewer,
        registry: Registry,
        sessions: Sessions,
        bound_seconds: float,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], datetime],
    ) -> None:
        self._reviewer = reviewer
        self._access = access
        self._registry = registry
        self._sessions = sessions
        self._bound = bound_seconds
        self._monotonic = monotonic
        self._wall = wall_clock

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(behaviour: Callable[..., object]) -> grpc.RpcMethodHandler[bytes, Message]:
            return grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=None,
                response_serializer=lambda m: m.SerializeToString(),
            )

        return grpc.method_handlers_generic_handler(
            SERVICE, {"ListNodes": unary(self.list_nodes), "GetNode": unary(self.get_node)}
        )

    async def _authorize(self, context: Context, verb: str, name: str | None) -> Reviewed:
        token = require_token(bearer_token(context.invocation_metadata()))
        try:
            # A remembered answer is read here; only a question to the API server needs a
            # thread (it blocks), so a busy caller does not cost a thread hop per call.
            user = self._reviewer.cached(token)
            if user is None:
                user = await asyncio.to_thread(self._reviewer.review, token, ())
        except ReviewUnavailableError as err:
            raise RefusalError(grpc.StatusCode.UNAVAILABLE, str(err)) from None
        if not user.authenticated:
            raise RefusalError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"token rejected: {user.error or 'not authenticated'}",
            )
        try:
            answer = self._access.cached(user, verb, name)
            if answer is None:
                answer = await asyncio.to_thread(self._access.allowed, user, verb, name)
            allowed, reason = answer
        except AccessReviewUnavailableError as err:
            raise RefusalError(grpc.StatusCode.UNAVAILABLE, str(err)) from None
        if not allowed:
            target = f'gpunodes.gpuctl.dev "{name}"' if name else "gpunodes.gpuctl.dev"
            raise RefusalError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{user.username} may not {verb} {target}" + (f": {reason}" if reason else ""),
            )
        return user

    def _state(self, record: NodeRecord) -> node_pb.NodeState:
        return node_state(record, self._monotonic(), self._wall(), self._bound)

    async def list_nodes(self, raw: bytes, context: Context) -> node_pb.ListNodesResponse:
        try:
            node_pb.ListNodesRequest.FromString(raw)
            await self._authorize(context, "list", None)
        except DecodeError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {err}")
        except RefusalError as refusal:
            await context.abort(refusal.code, refusal.message)
        records = sorted(self._registry.records(), key=lambda r: r.node)
        return node_pb.ListNodesResponse(nodes=[self._state(r) for r in records])

    async def get_node(self, raw: bytes, context: Context) -> node_pb.NodeState:
        try:
            request = node_pb.GetNodeRequest.FromString(raw)
            check_node_name(request.node_name)
            timeout = fresh_timeout(request)
            await self._authorize(context, "get", request.node_name)
            record = self._registry.get(request.node_name)
            if record is None:
                raise RefusalError(
                    grpc.StatusCode.NOT_FOUND,
                    f"no agent has reported for node {request.node_name}",
                )
            if request.fresh:
                await self._fresh(request.node_name, timeout)
                record = self._registry.get(request.node_name) or record
        except (DecodeError, InvalidMessageError) as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad GetNodeRequest: {err}")
        except RefusalError as refusal:
            await context.abort(refusal.code, refusal.message)
        return self._state(record)

    async def _fresh(self, node: str, timeout: float) -> None:
        try:
            await self._sessions.inspect(node, timeout)
        except NotConnectedError as err:
            raise RefusalError(grpc.StatusCode.UNAVAILABLE, str(err)) from None
        except TooManyRequestsError as err:
            raise RefusalError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err)) from None
        except TimeoutError:
            raise RefusalError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the agent of node {node} did not answer within {timeout:g}s",
            ) from None
