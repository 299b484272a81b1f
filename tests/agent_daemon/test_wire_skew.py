"""Coordinators of other releases on the wire to this agent (real gRPC over TLS): the Welcome
and requests a 0.1.0 coordinator sent, as its bytes, and the same from a newer coordinator with
fields this agent does not know, inside the messages and beside them. The agent takes the
Welcome, answers each request by its id and stays on the one stream
(docs/deploying.md#version-skew); tests/api/test_wire_compat.py checks the same bytes field by
field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.rpc.grpc_client import ClientTransport
from testbed.fakehost.scenarios import two_pro_b70_with_vfs
from tests.agent.fake_kernel import FakeKernel
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import Pki, agent_config, running_agent, welcome
from tests.support.wire import golden_coordinator_messages, newer_coordinator_message

ANSWERS = {"inspect": "report", "prepare": "prepare_result", "restore": "restore_result"}


def sent_by(release: str, kind: str) -> api.CoordinatorMessage:
    """The message of `kind` as a coordinator of `release` put it on the wire. Parsed by this
    build, which keeps the fields it does not know and sends them on as they came."""
    wire = (
        golden_coordinator_messages("0.1.0")[kind][0]
        if release == "0.1.0"
        else newer_coordinator_message(kind)
    )
    return api.CoordinatorMessage.FromString(wire)


@pytest.mark.parametrize("release", ["0.1.0", "newer"])
def test_a_coordinator_of_another_release_is_understood(
    release: str, tmp_path: Path, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    hello_answer = sent_by(release, "welcome")
    if release == "newer":
        assert len(hello_answer.SerializeToString()) > len(
            golden_coordinator_messages("0.1.0")["welcome"][0]
        ), "the newer Welcome goes out with the fields this build does not know"
    host = two_pro_b70_with_vfs(tmp_path / "host")
    coordinator = make_coordinator(welcome(), pki=pki, answer_hello_with=hello_answer)
    transport = ClientTransport(coordinator.target, ca_file=pki.ca_file)
    with running_agent(agent_config(host.root, token_file, transport), writer=FakeKernel(host)):
        coordinator.wait_reports(1)
        for kind, answer_kind in ANSWERS.items():
            request = sent_by(release, kind)
            request_id = getattr(request, kind).request_id
            coordinator.send(request)
            answered = coordinator.wait_answer(answer_kind, request_id)
            assert answered.WhichOneof("body") == answer_kind
    assert len(coordinator.streams) == 1, "the agent never dropped the stream"
