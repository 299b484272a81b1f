"""Live node reports at fleet scale: N agents against one coordinator, with a same-run baseline.

    .venv/bin/python -m bench.live_nodes [--agents 2000] [--reports 10] [--inspections 200]
        [--streams-per-connection 100]

A real control plane (testbed/harness: etcd + kube-apiserver) holds N Nodes, a Pod of the agent
ServiceAccount on each, and a TokenRequest token bound to each Pod. Then, for each server in
its own process (bench.live_nodes_server), N simulated agents (bench.agent_swarm) connect over
TLS (from processes of 500; 100 streams share an HTTP/2 connection, or
`--streams-per-connection`: 1 is what agents on separate nodes make) and each sends
`--reports` changed reports as fast as the streams take them:

- coordinator: coordinator.live_nodes.live.LiveNodes, as gpuctl-coordinator runs it: a TokenReview
  per agent token, the registry, the GPUNode mirror writing every node's changes to the API
  server (coalesced per node), NodeService;
- baseline: a bare grpc.aio AgentService server that accepts the same streams (no token
  check), parses each message and discards the reports.

Printed for both: connect time of all sessions, reports ingested per second, resident memory
with all sessions open; and the ratios. Then, on the coordinator with all sessions connected,
the round trip of a fresh inspection (NodeService.GetNode fresh=true -> InspectRequest ->
agent -> REQUESTED report -> answer), median and p99, against GetNode without `fresh` (the
same call answered from the registry) as its baseline. Everything shares this machine's
cores: the API server, etcd, the server under test and the swarm.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from bench.agent_swarm import STREAMS_PER_CONNECTION, SwarmProcesses, agent_token
from bench.timing import Timings, ratio_line
from coordinator.kube.client import Kube, path
from gpuctl.api.v1alpha1 import node_service_pb2 as node_pb
from gpuctl.api.v1alpha1 import node_service_pb2_grpc as node_grpc
from gpuctl.common import names
from testbed.harness import certs
from testbed.harness.access import KubeCluster
from testbed.harness.cluster import repository_root, start_cluster
from testbed.harness.ports import free_loopback_ports

NAMESPACE = "bench-live"
RBAC = "rbac.authorization.k8s.io"


def _create_node_pod_token(kube: Kube, node: str) -> str:
    kube.request("POST", path("", "v1", "nodes"), body={"metadata": {"name": node}})
    return agent_token(kube, NAMESPACE, "gpuctl-agent", node)


def prepare_cluster(cluster: KubeCluster, agents: int) -> tuple[list[tuple[str, str]], str]:
    """N (node, agent token) pairs, and a token that may get/list gpunodes."""
    with cluster.admin_client() as admin:
        kube = Kube(admin)
        kube.request("POST", path("", "v1", "namespaces"), body={"metadata": {"name": NAMESPACE}})
        for account in ("gpuctl-agent", "reader"):
            kube.request(
                "POST",
                path("", "v1", "serviceaccounts", namespace=NAMESPACE),
                body={"metadata": {"name": account}},
            )
        rule = {
            "apiGroups": [names.GROUP],
            "resources": [names.GPUNODE_PLURAL],
            "verbs": ["get", "list"],
        }
        kube.request(
            "POST",
            path(RBAC, "v1", "clusterroles"),
            body={"metadata": {"name": "bench-reader"}, "rules": [rule]},
        )
        kube.request(
            "POST",
            path(RBAC, "v1", "clusterrolebindings"),
            body={
                "metadata": {"name": "bench-reader"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "bench-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NAMESPACE}],
            },
        )
    nodes = [f"bench-n{index:05d}" for index in range(agents)]
    local = threading.local()

    def one(node: str) -> tuple[str, str]:
        if not hasattr(local, "kube"):
            local.kube = Kube(cluster.admin_client())
        return node, _create_node_pod_token(local.kube, node)

    with ThreadPoolExecutor(8) as pool:
        pairs = list(pool.map(one, nodes))
    return pairs, cluster.service_account_token(NAMESPACE, "reader")


class ServerProcess:
    """A bench.live_nodes_server subprocess and its latest status line."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.live_nodes_server", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.latest: dict[str, Any] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.latest = json.loads(line)

    def wait_for(
        self,
        what: str,
        probe: Callable[[dict[str, Any]], bool],
        timeout: float,
        poll: float = 0.02,
    ) -> None:
        deadline = time.monotonic() + timeout
        while not (self.latest and probe(self.latest)):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"server never reached: {what}; last status {self.latest}")
            time.sleep(poll)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


async def _fresh_round_trips(
    target: str, ca: bytes, token: str, nodes: list[str], runs: int
) -> tuple[Timings, Timings]:
    credentials = grpc.ssl_channel_credentials(root_certificates=ca)
    metadata = (("authorization", f"Bearer {token}"),)
    picks = random.Random(7)  # noqa: S311 - which nodes to ask, not a secret
    async with grpc.aio.secure_channel(target, credentials) as channel:
        stub = node_grpc.NodeServiceStub(channel)
        timings: dict[bool, list[float]] = {True: [], False: []}
        for fresh in (False, True):
            for run in range(runs + 5):
                request = node_pb.GetNodeRequest(node_name=picks.choice(nodes), fresh=fresh)
                started = time.perf_counter()
                await stub.GetNode(request, metadata=metadata)
                if run >= 5:  # warm-up: the first calls pay the token review
                    timings[fresh].append(time.perf_counter() - started)
    return (
        Timings("GetNode fresh=true (agent round trip)", tuple(timings[True])),
        Timings("GetNode fresh=false (from the registry)", tuple(timings[False])),
    )


def run_one(
    kind: str,
    server_argv: list[str],
    *,
    target: str,
    ca: bytes,
    agents: list[tuple[str, str]],
    reports: int,
    streams_per_connection: int,
    fresh: Callable[[], Any] | None,
) -> dict[str, Any]:
    server = ServerProcess([kind, *server_argv])
    swarm: SwarmProcesses | None = None
    count = len(agents)
    figures: dict[str, Any] = {}
    try:
        server.wait_for("listening", lambda s: "reports" in s, 60)
        started = time.perf_counter()
        swarm = SwarmProcesses(target, ca, reports, agents, streams_per_connection)
        server.wait_for("every agent's first report", lambda s: s["reports"] >= count, 600)
        figures["connect_seconds"] = time.perf_counter() - started
        figures["rss_connected_kb"] = server.latest["rss_kb"]
        swarm.go()
        started = time.perf_counter()
        total = count * (reports + 1)
        server.wait_for("every report", lambda s: s["reports"] >= total, 600, poll=0.005)
        figures["ingest_seconds"] = time.perf_counter() - started
        figures["rss_kb"] = server.latest["rss_kb"]
        figures["status"] = dict(server.latest)
        if fresh is not None:
            figures["fresh"] = asyncio.run(fresh())
    finally:
        if swarm is not None:
            swarm.stop()
        server.stop()
    failures = []
    while swarm is not None and not swarm.failures.empty():
        failures.append(swarm.failures.get())
    if failures:
        raise RuntimeError(f"{len(failures)} simulated agents failed: {failures[:3]}")
    figures["reports_per_second"] = count * reports / figures["ingest_seconds"]
    return figures


def _describe(label: str, figures: dict[str, Any], agents: int) -> None:
    print(
        f"{label}: {agents} sessions connected in {figures['connect_seconds']:.1f} s; "
        f"{figures['reports_per_second']:,.0f} reports/s ingested; "
        f"RSS {figures['rss_kb'] / 1024:.0f} MiB with all sessions open "
        f"({figures['rss_connected_kb'] / 1024:.0f} MiB after connecting)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--reports", type=int, default=10, help="changed reports per agent")
    parser.add_argument("--inspections", type=int, default=200)
    parser.add_argument(
        "--streams-per-connection",
        type=int,
        default=STREAMS_PER_CONNECTION,
        help="agent streams sharing one HTTP/2 connection (1: one per agent, as on real nodes)",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuctl-bench-live-"))
    now = datetime.datetime.now(datetime.UTC)
    control_plane, cluster = start_cluster(
        root / "cluster", repository_root(), os.environ, now, die_with_parent=True
    )
    try:
        ca = certs.make_ca(now, "bench-grpc-ca")
        serving = certs.make_serving_cert(ca, now)
        (root / "tls.crt").write_bytes(serving.cert_pem)
        (root / "tls.key").write_bytes(serving.key_pem)
        started = time.perf_counter()
        agents, reader_token = prepare_cluster(cluster, args.agents)
        print(
            f"setup: {args.agents} Nodes, Pods and bound tokens in "
            f"{time.perf_counter() - started:.0f} s"
        )
        (port,) = free_loopback_ports(1)
        target = f"localhost:{port}"
        tls_argv = [
            f"--port={port}",
            f"--tls-cert={root / 'tls.crt'}",
            f"--tls-key={root / 'tls.key'}",
        ]
        nodes = [node for node, _ in agents]

        def fresh() -> Any:
            return _fresh_round_trips(target, ca.cert_pem, reader_token, nodes, args.inspections)

        common: dict[str, Any] = {
            "target": target,
            "ca": ca.cert_pem,
            "agents": agents,
            "reports": args.reports,
            "streams_per_connection": args.streams_per_connection,
        }
        bare = run_one("bare", tls_argv, **common, fresh=None)
        coordinator_argv = [
            *tls_argv,
            f"--kubeconfig={cluster.kubeconfig}",
            f"--namespace={NAMESPACE}",
        ]
        coordinator = run_one("coordinator", coordinator_argv, **common, fresh=fresh)
        print(
            f"{args.agents} agents x {args.reports} changed reports each, TLS, "
            f"{args.streams_per_connection} per connection, one machine:"
        )
        _describe("coordinator (LiveNodes)", coordinator, args.agents)
        _describe("baseline (bare grpc.aio server)", bare, args.agents)
        print(
            "ratio coordinator / baseline: reports/s "
            f"{coordinator['reports_per_second'] / bare['reports_per_second']:.2f}, "
            f"RSS {coordinator['rss_kb'] / bare['rss_kb']:.2f}, "
            f"connect time {coordinator['connect_seconds'] / bare['connect_seconds']:.2f}"
        )
        status = coordinator["status"]
        print(
            f"coordinator: {status['token_reviews']} TokenReviews, "
            f"{status['gpunode_writes']} GPUNode status writes so far (coalesced per node)"
        )
        fresh_timing, registry_timing = coordinator["fresh"]
        for timing in (fresh_timing, registry_timing):
            print(
                f"{timing.label}: median {timing.median * 1e3:.2f} ms, "
                f"p99 {timing.percentile(99) * 1e3:.2f} ms over {len(timing.seconds)} calls"
            )
        print(ratio_line(fresh_timing, registry_timing))
    finally:
        control_plane.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
