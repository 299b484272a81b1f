"""Request dispatch: kind -> handler; unknown kinds are logged and the stream lives on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent.daemon.dispatch import RequestDispatch
from gpuctl.api.v1alpha1 import agent_service_pb2 as api


def test_each_kind_reaches_its_handler_and_unknown_ones_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    async def on_inspect(message: api.CoordinatorMessage) -> None:
        seen.append(message.inspect.request_id)

    dispatch = RequestDispatch({"inspect": on_inspect})
    inspect = api.CoordinatorMessage(inspect=api.InspectRequest(request_id="r-1"))
    welcome = api.CoordinatorMessage(welcome=api.Welcome())
    # A body from a newer coordinator arrives as an unknown field: no oneof is set.
    newer = api.CoordinatorMessage.FromString(bytes([0x7A, 0x00]))

    async def run() -> list[bool]:
        return [await dispatch.dispatch(m) for m in (inspect, welcome, newer)]

    with caplog.at_level(logging.WARNING, logger="agent.daemon.dispatch"):
        handled = asyncio.run(run())
    assert handled == [True, False, False]
    assert seen == ["r-1"]
    kinds = [getattr(record, "kind", None) for record in caplog.records]
    assert kinds == ["welcome", "(empty or unknown to this agent's API version)"]
    assert dispatch.kinds == frozenset({"inspect"})
