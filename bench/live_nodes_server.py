"""A server for bench.live_nodes, in its own process so its memory is its own.

    python -m bench.live_nodes_server coordinator --port P --tls-cert C --tls-key K \\
        --kubeconfig KC --namespace NS
    python -m bench.live_nodes_server bare --port P --tls-cert C --tls-key K

`coordinator` is coordinator.live_nodes.live.LiveNodes, as gpuctl-coordinator runs it: TokenReview
per token, the registry, the GPUNode mirror writing to the API server, NodeService. `bare` is
the baseline: a grpc.aio AgentService server with the same TLS and message limit that accepts
every stream (no token check), answers Hello with a Welcome, parses each message and discards
the reports. Both print one JSON line every 0.1 s on stdout: reports taken, open sessions,
resident memory (VmRSS, kB) and, for the coordinator, GPUNode writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes, LiveNodesConfig
from coordinator.live_nodes.server import DEFAULT_MAX_MESSAGE_BYTES, ServerConfig, TlsFiles
from coordinator.live_nodes.streams.agent_service import AgentServiceConfig
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common.names import AGENT_AUDIENCE

# Ingestion capacity is the question, so the per-agent report limit is out of the way.
UNLIMITED_REPORTS_PER_MINUTE = 1_000_000


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def emit(figures: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({**figures, "rss_kb": rss_kb()}) + "\n")
    sys.stdout.flush()


def run_coordinator(args: argparse.Namespace) -> None:
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=args.kubeconfig, client_configuration=configuration
    )
    configuration.connection_pool_maxsize = 16
    kube = Kube(k8s_client.ApiClient(configuration))
    live = LiveNodes(
        kube,
        LiveNodesConfig(
            server=ServerConfig(
                agents=AgentServiceConfig(
                    audience=AGENT_AUDIENCE,
                    agent_username=f"system:serviceaccount:{args.namespace}:gpuctl-agent",
                    heartbeat_seconds=30.0,
                    max_reports_per_minute=UNLIMITED_REPORTS_PER_MINUTE,
                ),
                host="127.0.0.1",
                port=args.port,
                tls=TlsFiles(args.tls_cert, args.tls_key),
                report_freshness_seconds=90.0,
            ),
        ),
        monotonic=time.monotonic,
        wall_clock=lambda: datetime.now(UTC),
        epoch_clock=time.time,
    )
    live.start()
    while True:
        emit(
            {
                "reports": live.registry.reports_accepted,
                "sessions": live.server.connected_nodes(),
                "gpunode_writes": live.mirror.writes,
                "token_reviews": live.server.reviewer.reviews_sent,
            }
        )
        time.sleep(0.1)


class BareAgentService:
    """Accepts every stream, welcomes it, parses and discards what it sends."""

    def __init__(self) -> None:
        self.reports = 0
        self.sessions = 0
        welcome = agent_pb.Welcome(max_reports_per_minute=UNLIMITED_REPORTS_PER_MINUTE)
        welcome.heartbeat_interval.FromSeconds(30)
        self._welcome = agent_pb.CoordinatorMessage(welcome=welcome)

    async def connect(
        self,
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[bytes, agent_pb.CoordinatorMessage],
    ) -> None:
        self.sessions += 1
        try:
            first = True
            async for raw in requests:
                message = agent_pb.AgentMessage.FromString(raw)
                if first:
                    first = False
                    await context.write(self._welcome)
                elif message.WhichOneof("body") == "report":
                    self.reports += 1
        finally:
            self.sessions -= 1


async def serve_bare(args: argparse.Namespace) -> None:
    service = BareAgentService()
    handler: grpc.RpcMethodHandler[bytes, agent_pb.CoordinatorMessage]
    handler = grpc.stream_stream_rpc_method_handler(
        service.connect,
        request_deserializer=None,
        response_serializer=agent_pb.CoordinatorMessage.SerializeToString,
    )
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "gpuctl.api.v1alpha1.AgentService", {"Connect": handler}
            ),
        )
    )
    credentials = grpc.ssl_server_credentials(
        [(args.tls_key.read_bytes(), args.tls_cert.read_bytes())]
    )
    server.add_secure_port(f"127.0.0.1:{args.port}", credentials)
    await server.start()
    while True:
        emit({"reports": service.reports, "sessions": service.sessions})
        await asyncio.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kind", choices=["coordinator", "bare"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", type=Path, required=True)
    parser.add_argument("--tls-key", type=Path, required=True)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace")
    args = parser.parse_args()
    if args.kind == "coordinator":
        threading.Thread(target=run_coordinator, args=(args,), daemon=True).start()
        threading.Event().wait()
    else:
        asyncio.run(serve_bare(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
