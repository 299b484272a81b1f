"""Prepare and restore calls over an agent's stream, answered by id (the rollout's seam).

`AgentServer.request_prepare`/`request_restore` send the request on the node's stream and
resolve with the result carrying the same id; an agent that does not answer fails the call at
its deadline; a result claiming another node ends the stream.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import grpc
import pytest

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from testbed.agent_client import sample_report
from testbed.cluster_agents import AgentPods, connect, delete_gpunode
from testbed.harness.serving_tls import ServingTls

pytestmark = pytest.mark.integration


def test_prepare_and_restore_round_trip(
    *, make_node: Any, agents: AgentPods, live: LiveNodes, tls: ServingTls, kube_admin: Any
) -> None:
    node = make_node("gpu").metadata.name
    try:
        with connect(live, tls, agents.token(node)) as agent:
            agent.hello(node)
            agent.welcome()
            prepare = agent_pb.PrepareRequest(module_name="xe", allow_disable_vfs=True)
            future = live.server.request_prepare(node, prepare, timeout=5.0)
            sent = agent.next_message()
            assert sent.WhichOneof("body") == "prepare"
            assert sent.prepare.module_name == "xe"
            assert sent.prepare.request_id.startswith("rq-")
            change = agent_pb.NodeChange(
                disabled_vfs=agent_pb.DisabledVfs(pci_address="0000:03:00.0", num_vfs=2)
            )
            agent.send(
                agent_pb.AgentMessage(
                    prepare_result=agent_pb.PrepareResult(
                        request_id=sent.prepare.request_id,
                        ready=True,
                        changes=[change],
                        report=sample_report(node),
                    )
                )
            )
            result = future.result(timeout=5)
            assert result.ready
            assert list(result.changes) == [change]

            restore = agent_pb.RestoreRequest(request_id="restore-1", changes=[change])
            future_restore = live.server.request_restore(node, restore, timeout=0.5)
            assert agent.next_message().restore.request_id == "restore-1"
            with pytest.raises((TimeoutError, concurrent.futures.TimeoutError)):
                future_restore.result(timeout=5)  # the agent never answers

            # A result about another node is a lie about identity: the stream ends.
            agent.send(
                agent_pb.AgentMessage(
                    restore_result=agent_pb.RestoreResult(
                        request_id="restore-1", report=sample_report("someone-else")
                    )
                )
            )
            code, details = agent.final_status()
            assert code is grpc.StatusCode.PERMISSION_DENIED
            assert "not 'someone-else'" in details
    finally:
        delete_gpunode(Kube(kube_admin), node)
