"""GPUNode inspect requests: which are unanswered, and how failures are recorded."""

from __future__ import annotations

import concurrent.futures

from coordinator.live_nodes.streams.inspect_requests import InspectRequests, unanswered_request
from coordinator.live_nodes.streams.registry import Registry
from coordinator.live_nodes.streams.sessions import NotConnectedError
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from tests.support.clock import ManualClock


def _gpunode(request_id: str | None, answered: str | None = None) -> dict[str, object]:
    spec = {"inspectRequest": {"id": request_id}} if request_id else {}
    status = {"answeredInspectRequest": answered} if answered else {}
    return {"metadata": {"name": "gpu-1"}, "spec": spec, "status": status}


def test_unanswered_request() -> None:
    assert unanswered_request(_gpunode(None)) is None
    assert unanswered_request(_gpunode("a")) == "a"
    assert unanswered_request(_gpunode("a", answered="a")) is None
    assert unanswered_request(_gpunode("b", answered="a")) == "b"


class _Agent:
    """request_report as the server offers it, answered by hand."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float, str]] = []
        self.futures: list[concurrent.futures.Future[report_pb.NodeReport]] = []

    def __call__(
        self, node: str, timeout: float, request_id: str
    ) -> concurrent.futures.Future[report_pb.NodeReport]:
        self.asked.append((node, timeout, request_id))
        future: concurrent.futures.Future[report_pb.NodeReport] = concurrent.futures.Future()
        self.futures.append(future)
        return future


def test_a_request_is_asked_once_and_a_failure_recorded_as_its_answer() -> None:
    clock = ManualClock()
    registry = Registry(clock, clock.wall)
    agent = _Agent()
    requests = InspectRequests(registry, agent, timeout=4.0)
    requests.observed("ADDED", _gpunode("r1"))
    requests.observed("MODIFIED", _gpunode("r1"))  # still in flight: not asked again
    assert agent.asked == [("gpu-1", 4.0, "r1")]
    agent.futures[0].set_exception(NotConnectedError("the agent of node gpu-1 is not connected"))
    record = registry.get("gpu-1")
    assert record is not None
    assert record.answered_request == "r1"
    assert record.inspect_error == "agent not connected: the agent of node gpu-1 is not connected"

    requests.observed("MODIFIED", _gpunode("r2", answered="r1"))
    agent.futures[1].set_exception(TimeoutError())
    record = registry.get("gpu-1")
    assert record is not None
    assert record.inspect_error == "the agent did not answer within 4s"
    requests.observed("MODIFIED", _gpunode("r2", answered="r2"))
    assert len(agent.asked) == 2


def test_another_shards_node_is_not_asked_nor_answered() -> None:
    clock = ManualClock()
    registry = Registry(clock, clock.wall)
    agent = _Agent()
    scope: dict[str, bool | None] = {"gpu-1": None}
    requests = InspectRequests(registry, agent, timeout=4.0, in_scope=scope.get)
    requests.observed("ADDED", _gpunode("r1"))  # not known to be ours yet
    scope["gpu-1"] = False
    requests.observed("MODIFIED", _gpunode("r1"))  # another pool's
    assert agent.asked == []
    assert registry.get("gpu-1") is None  # no "not connected" answer written for it
    scope["gpu-1"] = True
    requests.observed("MODIFIED", _gpunode("r1"))
    assert agent.asked == [("gpu-1", 4.0, "r1")]
