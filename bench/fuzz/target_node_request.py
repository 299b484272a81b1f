"""Fuzz the NodeService's request handling before it reaches the registry: parsing, the node
name check and the fresh-inspection timeout. Bad input may only be refused."""

from __future__ import annotations

import contextlib

from google.protobuf.message import DecodeError

from coordinator.live_nodes.access.identity import RefusalError
from coordinator.live_nodes.streams.limits import InvalidMessageError, check_node_name
from coordinator.live_nodes.streams.node_service import MAX_FRESH_TIMEOUT, fresh_timeout
from gpuctl.api.v1alpha1 import node_service_pb2 as node_pb

SEEDS = [
    node_pb.GetNodeRequest(node_name="gpu-node-1", fresh=True).SerializeToString(),
    node_pb.ListNodesRequest().SerializeToString(),
]


def fuzz_one(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        node_pb.ListNodesRequest.FromString(data)
    try:
        request = node_pb.GetNodeRequest.FromString(data)
        check_node_name(request.node_name)
        timeout = fresh_timeout(request)
    except (DecodeError, InvalidMessageError, RefusalError):
        return
    assert 0 < timeout <= MAX_FRESH_TIMEOUT
