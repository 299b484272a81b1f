"""The live agent streams, one per node, inside the server's event loop.

`Sessions` keeps the current stream of each node (a newer stream for a node replaces, and
closes, the older one) and asks agents for fresh reports: `inspect` sends an InspectRequest
with an id and waits, with a deadline, for the ReportUpdate that carries the same id.
Everything here runs on the gRPC server's event loop; other threads go through
server.AgentServer, which schedules onto that loop.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field

import grpc

from coordinator.live_nodes.access.identity import RefusalError
from coordinator.live_nodes.streams.ratelimit import TokenBucket
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

MAX_PENDING_REQUESTS = 64
CallResult = agent_pb.PrepareResult | agent_pb.RestoreResult
_stream_ids = itertools.count(1)


class NotConnectedError(Exception):
    """The node's agent has no open stream (or it closed while we waited)."""


class TooManyRequestsError(Exception):
    """The node already has MAX_PENDING_REQUESTS unanswered inspect requests."""


@dataclass
class Pending:
    """An InspectRequest sent and not yet answered."""

    future: asyncio.Future[report_pb.NodeReport] | None
    # The id came from a GPUNode's spec.inspectRequest: the answer is recorded as answering it.
    gpunode_request: bool = False


@dataclass
class AgentSession:
    """One open stream of one node's agent."""

    node: str
    report_bucket: TokenBucket
    message_bucket: TokenBucket
    stream_id: int = field(default_factory=lambda: next(_stream_ids))
    outbox: asyncio.Queue[agent_pb.CoordinatorMessage | RefusalError] = field(
        default_factory=asyncio.Queue
    )
    pending: dict[str, Pending] = field(default_factory=dict)
    # Prepare/restore requests sent and not yet answered, by request id.
    calls: dict[str, asyncio.Future[CallResult]] = field(default_factory=dict)
    last_sequence: int = 0
    resync_pending: bool = False
    dropped_reports: int = 0

    def send_inspect(self, request_id: str) -> None:
        message = agent_pb.CoordinatorMessage(
            inspect=agent_pb.InspectRequest(request_id=request_id)
        )
        self.outbox.put_nowait(message)

    def close(self, refusal: RefusalError) -> None:
        self.outbox.put_nowait(refusal)

    def fail_pending(self, why: str) -> None:
        for pending in self.pending.values():
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(NotConnectedError(why))
        self.pending.clear()
        for call in self.calls.values():
            if not call.done():
                call.set_exception(NotConnectedError(why))
        self.calls.clear()

    def answered(self, result: CallResult) -> bool:
        """A PrepareResult/RestoreResult for a call we made; False for an unknown id."""
        call = self.calls.pop(result.request_id, None)
        if call is None or call.done():
            return False
        call.set_result(result)
        return True


class Sessions:
    """The current session of every connected node (event-loop thread only)."""

    def __init__(self) -> None:
        self._by_node: dict[str, AgentSession] = {}

    def __len__(self) -> int:
        return len(self._by_node)

    def get(self, node: str) -> AgentSession | None:
        return self._by_node.get(node)

    def open(self, session: AgentSession) -> None:
        """`session` becomes the node's stream; an older one is told to close."""
        older = self._by_node.get(session.node)
        self._by_node[session.node] = session
        if older is not None:
            older.close(
                RefusalError(
                    grpc.StatusCode.ABORTED,
                    f"replaced by a newer stream for node {session.node}",
                )
            )
            older.fail_pending("the stream was replaced by a newer one")

    def close(self, session: AgentSession) -> None:
        if self._by_node.get(session.node) is session:
            del self._by_node[session.node]
        session.fail_pending("the agent's stream closed")

    async def inspect(
        self, node: str, timeout: float, gpunode_request_id: str | None = None
    ) -> report_pb.NodeReport:
        """Ask `node`'s agent for a report now and wait for it (TimeoutError after `timeout`)."""
        session = self._by_node.get(node)
        if session is None:
            raise NotConnectedError(f"the agent of node {node} is not connected")
        request_id = gpunode_request_id or f"rq-{uuid.uuid4().hex}"
        pending = session.pending.get(request_id)
        if pending is None or pending.future is None:
            if len(session.pending) >= MAX_PENDING_REQUESTS:
                raise TooManyRequestsError(
                    f"node {node} has {MAX_PENDING_REQUESTS} requests pending"
                )
            pending = Pending(
                asyncio.get_running_loop().create_future(),
                gpunode_request=gpunode_request_id is not None,
            )
            session.pending[request_id] = pending
            session.send_inspect(request_id)
        assert pending.future is not None
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), timeout)
        except BaseException:  # a deadline, or the caller went away (cancelled): forget it
            if session.pending.get(request_id) is pending:
                del session.pending[request_id]
            raise

    async def call(
        self, node: str, message: agent_pb.CoordinatorMessage, request_id: str, timeout: float
    ) -> CallResult:
        """Send a PrepareRequest/RestoreRequest (`message`) and wait for its result by id."""
        session = self._by_node.get(node)
        if session is None:
            raise NotConnectedError(f"the agent of node {node} is not connected")
        if len(session.calls) >= MAX_PENDING_REQUESTS:
            raise TooManyRequestsError(f"node {node} has {MAX_PENDING_REQUESTS} calls pending")
        if request_id in session.calls:
            raise ValueError(f"request {request_id} is already pending on node {node}")
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        session.calls[request_id] = future
        session.outbox.put_nowait(message)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except BaseException:  # a deadline, or the caller went away: forget it
            if session.calls.get(request_id) is future:
                del session.calls[request_id]
            raise
