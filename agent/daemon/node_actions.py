"""Prepare and restore requests in the daemon: queued for the inspection worker, answered
on the stream they came on, with their request id.

They change the node, so they run on the worker's single thread, one at a time and never
during an inspection (each inspects the node itself, before and after). The handler only
queues a `NodeActionJob` tagged with the stream's generation (a request without an id is
logged and dropped: its answer could not be matched, and the coordinator closes a stream that
sends an answer without one); `NodeActions.answer` turns the
request into its answer (agent.prepare / agent.restore) and never raises: a request it
cannot serve, or an unexpected failure, becomes an answer saying so in words. An agent
started without a sysfs writer changes nothing and says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf import json_format

from agent.hostfs import HostFiles
from agent.prepare import prepare_node
from agent.restore import restore_node
from agent.sysfs_write import SysfsWriter
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb

log = logging.getLogger("agent.daemon")

NODE_ACTION_KINDS = ("prepare", "restore")
NO_REQUEST_ID = "node change request without a request_id ignored: nothing was changed"
NO_WRITER = (
    "this agent may not change the node (started without --allow-node-changes; chart value "
    "agent.allowNodeChanges): nothing was changed"
)


@dataclass(frozen=True)
class NodeActionJob:
    # The stream the request came on: the answer goes back on it, or nowhere.
    generation: int
    message: api.CoordinatorMessage


def request_id_of(message: api.CoordinatorMessage) -> str:
    kind = message.WhichOneof("body")
    if kind == "prepare":
        return message.prepare.request_id
    if kind == "restore":
        return message.restore.request_id
    return ""


class NodeActions:
    def __init__(
        self,
        *,
        inspect: Callable[[], pb.NodeReport],
        files: HostFiles,
        writer: SysfsWriter | None,
        module_name: str,
    ) -> None:
        self._inspect = inspect
        self._files = files
        self._writer = writer
        self._module_name = module_name

    def answer(self, message: api.CoordinatorMessage) -> api.AgentMessage:
        """The answer to a prepare or restore request; blocking (file reads and writes)."""
        try:
            return self._answer(message)
        except Exception as error:
            log.exception("node change request failed", extra={"kind": message.WhichOneof("body")})
            return failure_answer(message, f"the agent failed: {type(error).__name__}: {error}")

    def _answer(self, message: api.CoordinatorMessage) -> api.AgentMessage:
        kind = message.WhichOneof("body")
        if self._writer is None:
            return failure_answer(message, NO_WRITER)
        if kind == "prepare":
            result = prepare_node(
                message.prepare,
                inspected_module=self._module_name,
                inspect=self._inspect,
                writer=self._writer,
            )
            return api.AgentMessage(prepare_result=result)
        if kind == "restore":
            restored = restore_node(
                message.restore, inspect=self._inspect, files=self._files, writer=self._writer
            )
            return api.AgentMessage(restore_result=restored)
        raise ValueError(f"not a node change request: {kind}")


def failure_answer(message: api.CoordinatorMessage, why: str) -> api.AgentMessage:
    """An answer that changes nothing and says why."""
    request_id = request_id_of(message)
    if message.WhichOneof("body") == "restore":
        return api.AgentMessage(
            restore_result=api.RestoreResult(request_id=request_id, errors=[why])
        )
    return api.AgentMessage(prepare_result=api.PrepareResult(request_id=request_id, error=why))


def describe_answer(answer: api.AgentMessage) -> dict[str, object]:
    """Log fields of an answer, its changes included (so none is lost if it is not sent)."""
    if answer.WhichOneof("body") == "prepare_result":
        prepared = answer.prepare_result
        return {
            "requestId": prepared.request_id,
            "ready": prepared.ready,
            "changes": [json_format.MessageToDict(change) for change in prepared.changes],
            "blockers": [blocker.message for blocker in prepared.blockers],
            "error": prepared.error,
        }
    restored = answer.restore_result
    return {
        "requestId": restored.request_id,
        "restored": len(restored.restored),
        "errors": list(restored.errors),
    }
