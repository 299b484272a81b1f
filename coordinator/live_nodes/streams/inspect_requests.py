"""Answering GPUNode `spec.inspectRequest`: ask the agent now, record the answer or why not.

`gpuctl node inspect NODE --fresh` writes a new `spec.inspectRequest.id`. For every GPUNode
whose request id differs from `status.answeredInspectRequest` (and is not being answered
already), the coordinator sends the agent an InspectRequest with that id; the agent's answer
is recorded as answering it (the mirror then writes the report and the id together). When the
agent is not connected or does not answer within the deadline, the id is answered with
`status.inspectError` saying why, so the CLI never waits forever.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.live_nodes.streams.registry import Registry
from coordinator.live_nodes.streams.sessions import NotConnectedError, TooManyRequestsError
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

log = logging.getLogger(__name__)

RequestReport = Callable[[str, float, str], "concurrent.futures.Future[report_pb.NodeReport]"]


def unanswered_request(gpunode: Mapping[str, Any]) -> str | None:
    """The id of the GPUNode's inspect request when it is not answered yet."""
    request = (gpunode.get("spec") or {}).get("inspectRequest") or {}
    request_id = request.get("id")
    if not isinstance(request_id, str) or not request_id:
        return None
    answered = (gpunode.get("status") or {}).get("answeredInspectRequest")
    return None if answered == request_id else request_id


def failure_reason(error: BaseException, timeout: float) -> str:
    if isinstance(error, NotConnectedError):
        return f"agent not connected: {error}"
    if isinstance(error, TimeoutError | concurrent.futures.TimeoutError):
        return f"the agent did not answer within {timeout:g}s"
    if isinstance(error, TooManyRequestsError):
        return f"too many requests pending: {error}"
    return f"inspect request failed: {error}"


class InspectRequests:
    """Reacts to GPUNode watch events by asking agents for fresh reports."""

    def __init__(
        self,
        registry: Registry,
        request_report: RequestReport,
        timeout: float = 10.0,
        *,
        in_scope: Callable[[str], bool | None] = lambda _node: True,
    ) -> None:
        self._registry = registry
        # Another shard's node (coordinator/live_nodes/access/node_scope.py) is that shard's to
        # answer.
        self._in_scope = in_scope
        self._request_report = request_report
        self._timeout = timeout
        self._in_flight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def observed(self, kind: str, gpunode: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        node = gpunode["metadata"]["name"]
        request_id = unanswered_request(gpunode)
        if request_id is None or self._in_scope(node) is not True:
            return
        record = self._registry.get(node)
        if record is not None and record.answered_request == request_id:
            return  # answered; the mirror is writing it
        key = (node, request_id)
        with self._lock:
            if key in self._in_flight:
                return
            self._in_flight.add(key)
        log.info("inspect request", extra={"node": node, "request_id": request_id})
        try:
            future = self._request_report(node, self._timeout, request_id)
        except Exception as err:  # the server is not running
            self._fail(key, err)
            return
        future.add_done_callback(lambda done: self._done(key, done))

    def _done(
        self, key: tuple[str, str], future: concurrent.futures.Future[report_pb.NodeReport]
    ) -> None:
        error = future.exception()
        if error is not None:
            self._fail(key, error)
            return
        with self._lock:
            self._in_flight.discard(key)

    def _fail(self, key: tuple[str, str], error: BaseException) -> None:
        node, request_id = key
        why = failure_reason(error, self._timeout)
        log.warning("inspect request not answered", extra={"node": node, "reason": why})
        self._registry.inspect_failed(node, request_id, why)
        with self._lock:
            self._in_flight.discard(key)
