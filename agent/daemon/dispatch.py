"""Coordinator requests on the stream: request kind -> handler.

A CoordinatorMessage's kind is the name of its `body` oneof field ("inspect", "welcome").
The session loop only calls `dispatch`; adding a request (the rollout's "prepare for unload":
unbind idle devices, set sriov_numvfs to 0) means adding a field to the proto and a handler
to the table, not reshaping the loop. A kind without a handler, or a body this agent's proto
does not know (a newer coordinator), is logged and ignored: the stream stays up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from gpuctl.api.v1alpha1 import agent_service_pb2 as api

log = logging.getLogger("agent.daemon.dispatch")

Handler = Callable[[api.CoordinatorMessage], Awaitable[None]]


class RequestDispatch:
    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        self._handlers = dict(handlers)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self._handlers)

    async def dispatch(self, message: api.CoordinatorMessage) -> bool:
        """Run the handler of `message`'s kind; False when there is none."""
        kind = message.WhichOneof("body")
        handler = self._handlers.get(kind) if kind is not None else None
        if handler is None:
            log.warning(
                "ignoring a coordinator message this agent cannot handle",
                extra={"kind": kind or "(empty or unknown to this agent's API version)"},
            )
            return False
        await handler(message)
        return True
