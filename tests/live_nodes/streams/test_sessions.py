"""Sessions in the event loop: one per node, inspect requests and their deadlines."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from coordinator.live_nodes.access.identity import RefusalError
from coordinator.live_nodes.streams.ratelimit import TokenBucket
from coordinator.live_nodes.streams.sessions import (
    MAX_PENDING_REQUESTS,
    AgentSession,
    NotConnectedError,
    Sessions,
    TooManyRequestsError,
)
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from tests.support.clock import ManualClock


def _session(node: str) -> AgentSession:
    clock = ManualClock()
    return AgentSession(node, TokenBucket(60, 10, clock), TokenBucket(600, 100, clock))


def test_a_newer_session_closes_the_older_and_fails_its_requests() -> None:
    async def scenario() -> None:
        sessions = Sessions()
        older, newer = _session("n1"), _session("n1")
        sessions.open(older)
        waiting = asyncio.create_task(sessions.inspect("n1", 5.0))
        await asyncio.sleep(0)
        sessions.open(newer)
        with pytest.raises(NotConnectedError, match="replaced"):
            await waiting
        sent = older.outbox.get_nowait()  # the InspectRequest, then the order to close
        assert not isinstance(sent, RefusalError)
        closing = older.outbox.get_nowait()
        assert isinstance(closing, RefusalError)
        assert closing.code is grpc.StatusCode.ABORTED
        sessions.close(older)  # the older stream ending does not remove the newer
        assert sessions.get("n1") is newer

    asyncio.run(scenario())


def test_inspect_is_answered_by_the_report_with_its_id() -> None:
    async def scenario() -> None:
        sessions = Sessions()
        session = _session("n1")
        sessions.open(session)
        waiting = asyncio.create_task(sessions.inspect("n1", 5.0, gpunode_request_id="req-9"))
        await asyncio.sleep(0)
        request = session.outbox.get_nowait()
        assert not isinstance(request, RefusalError)
        assert request.inspect.request_id == "req-9"
        pending = session.pending["req-9"]
        assert pending.gpunode_request
        assert pending.future is not None
        pending.future.set_result(report_pb.NodeReport(node_name="n1"))
        assert (await waiting).node_name == "n1"

    asyncio.run(scenario())


def test_a_silent_agent_times_out_and_leaves_nothing_pending() -> None:
    async def scenario() -> None:
        sessions = Sessions()
        session = _session("n1")
        sessions.open(session)
        with pytest.raises(TimeoutError):
            await sessions.inspect("n1", 0.01)
        assert session.pending == {}
        with pytest.raises(NotConnectedError, match="not connected"):
            await sessions.inspect("n2", 0.01)

    asyncio.run(scenario())


def test_pending_requests_are_bounded() -> None:
    async def scenario() -> None:
        sessions = Sessions()
        sessions.open(_session("n1"))
        waiting = [
            asyncio.create_task(sessions.inspect("n1", 5.0)) for _ in range(MAX_PENDING_REQUESTS)
        ]
        await asyncio.sleep(0)
        with pytest.raises(TooManyRequestsError):
            await sessions.inspect("n1", 5.0)
        for task in waiting:  # callers that go away leave nothing behind
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        session = sessions.get("n1")
        assert session is not None
        assert session.pending == {}

    asyncio.run(scenario())


def test_prepare_and_restore_calls_are_answered_by_id() -> None:
    async def scenario() -> None:
        sessions = Sessions()
        session = _session("n1")
        sessions.open(session)
        request = agent_pb.CoordinatorMessage(prepare=agent_pb.PrepareRequest(request_id="p-1"))
        waiting = asyncio.create_task(sessions.call("n1", request, "p-1", 5.0))
        await asyncio.sleep(0)
        assert session.outbox.get_nowait() == request
        assert not session.answered(agent_pb.PrepareResult(request_id="other"))
        assert session.answered(agent_pb.PrepareResult(request_id="p-1", ready=True))
        result = await waiting
        assert isinstance(result, agent_pb.PrepareResult)
        assert result.ready
        assert session.calls == {}
        with pytest.raises(TimeoutError):
            await sessions.call("n1", request, "p-2", 0.01)
        assert session.calls == {}

    asyncio.run(scenario())
