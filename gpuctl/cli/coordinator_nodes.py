"""Read GPU nodes straight from the coordinator's NodeService over gRPC (`--coordinator`).

For admins who talk to the coordinator directly (a port-forward, a jump host). The caller's
bearer token (`--token-file`, or $GPUCTL_TOKEN) must pass the coordinator's TokenReview and
SubjectAccessReview on `gpunodes.gpuctl.dev`; the transport flags are the agent's own
(gpuctl.rpc.grpc_client).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf.duration_pb2 import Duration

from gpuctl.api.v1alpha1 import node_service_pb2 as service_pb
from gpuctl.api.v1alpha1 import node_service_pb2_grpc as service_grpc
from gpuctl.cli.errors import CommandError
from gpuctl.cli.node_view import NodeView, from_node_state
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rpc.grpc_client import ClientTransport, bearer_metadata, open_channel
from gpuctl.rpc.grpc_errors import describe_rpc_failure

CALL_TIMEOUT = 20.0


class CoordinatorNodeSource:
    def __init__(self, transport: ClientTransport, token: str | None) -> None:
        self._transport = transport
        self._metadata = bearer_metadata(token) if token else ()

    def list_nodes(self) -> Sequence[NodeView]:
        with open_channel(self._transport) as channel:
            stub = service_grpc.NodeServiceStub(channel)
            try:
                answer = stub.ListNodes(
                    service_pb.ListNodesRequest(), metadata=self._metadata, timeout=CALL_TIMEOUT
                )
            except grpc.RpcError as error:
                raise self._failed("list nodes", error) from error
        return [from_node_state(state) for state in answer.nodes]

    def pods_on(self, name: str) -> Sequence[PodFacts] | None:
        """The coordinator's NodeService serves reports, not pods: GPU clients stay UIDs."""
        return None

    def rollout_of(self, name: str) -> str:
        """The NodeService serves reports, not Nodes: the rollout's view is `gpuctl rollout
        status`."""
        return ""

    def get_node(self, name: str, *, fresh: bool, timeout: float) -> NodeView:
        request = service_pb.GetNodeRequest(node_name=name, fresh=fresh)
        if fresh:
            request.timeout.CopyFrom(Duration(seconds=int(timeout), nanos=int(timeout % 1 * 1e9)))
        with open_channel(self._transport) as channel:
            stub = service_grpc.NodeServiceStub(channel)
            try:
                state = stub.GetNode(
                    request, metadata=self._metadata, timeout=timeout + CALL_TIMEOUT
                )
            except grpc.RpcError as error:
                if error.code() is grpc.StatusCode.NOT_FOUND:
                    raise CommandError(
                        f'no GPU node "{name}": no agent has reported for it'
                    ) from error
                if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise CommandError(
                        f'no fresh report for "{name}" within {timeout:g}s: '
                        "is the node's agent connected?"
                    ) from error
                raise self._failed(f'get node "{name}"', error) from error
        return from_node_state(state)

    def _failed(self, what: str, error: grpc.RpcError) -> CommandError:
        code = error.code() if isinstance(error, grpc.Call) else None
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        reason = describe_rpc_failure(code, details or "")
        return CommandError(
            f"the coordinator at {self._transport.describe()} could not {what}: {reason}"
        )
