"""The coordinators of bench.fleet_scale, one per node pool, and the agents connected to each.

Each is `gpuctl-coordinator` through bench.fleet_coordinator (its API requests counted),
with `--node-selector`, `--gpudriver-selector` and a Lease of its pool when the fleet is
sharded; its pool's simulated agents (bench.agent_swarm) connect to it. Pools start one after
another, as releases are installed. The figures of several coordinators add up here.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent_swarm import SwarmProcesses
from bench.fleet_observe import Coordinator, listening, wait_for
from bench.fleet_world import (
    AGENT_SA,
    NAMESPACE,
    POOL_LABEL,
    SELECTOR,
    World,
    count_nodes,
    driver_of,
    pool_name,
    pool_of,
)
from coordinator.kube.client import Kube, path
from gpuctl.common import names
from testbed.harness import certs
from testbed.harness.ports import free_loopback_ports

UNLIMITED_REPORTS_PER_MINUTE = 1_000_000
LENIENT_LEASE = ("--lease-duration=120", "--renew-deadline=90", "--retry-period=5")


@dataclass
class Shard:
    """One pool's GPUDriver, its agents, and the coordinator and simulated agents serving it."""

    pool: int
    driver: str
    agents: list[tuple[str, str]]
    coordinator: Coordinator
    swarm: SwarmProcesses

    @property
    def bound(self) -> int:
        return max(1, math.floor(len(self.agents) * 0.10))

    def all_connected(self) -> bool:
        self.check_running()
        return self.coordinator.metric("gpuctl_agent_sessions") >= len(self.agents)

    def check_running(self) -> None:
        """Stops the run when the coordinator exited (it does when it loses its Lease)."""
        code = self.coordinator.process.poll()
        if code is not None:
            raise RuntimeError(f"the coordinator of pool {self.pool} exited with {code}")


def start_shard(
    world: World, args: argparse.Namespace, root: Path, pool: int, ca: certs.KeyPair
) -> Shard:
    """Pool `pool`'s coordinator (the fleet's, unsharded), and its agents connected to it."""
    folder = root / f"shard-{pool}"
    folder.mkdir()
    serving = certs.make_serving_cert(ca, datetime.datetime.now(datetime.UTC))
    (folder / "tls.crt").write_bytes(serving.cert_pem)
    (folder / "tls.key").write_bytes(serving.key_pem)
    grpc_port, metrics_port = free_loopback_ports(2)
    sharding = []
    if args.shards > 1:
        own = f"{POOL_LABEL}={pool_name(pool)}"
        sharding = [
            f"--node-selector={own}",
            f"--gpudriver-selector={own}",
            f"--lease-name=gpuctl-coordinator-{pool_name(pool)}",
        ]
    coordinator = Coordinator(
        [
            f"--kubeconfig={world.cluster.kubeconfig}",
            f"--namespace={NAMESPACE}",
            f"--identity=fleet-bench-{pool}",
            *sharding,
            f"--grpc-port={grpc_port}",
            "--grpc-address=127.0.0.1",
            f"--tls-cert-file={folder / 'tls.crt'}",
            f"--tls-key-file={folder / 'tls.key'}",
            f"--agent-service-account=system:serviceaccount:{NAMESPACE}:{AGENT_SA}",
            f"--max-reports-per-minute={UNLIMITED_REPORTS_PER_MINUTE}",
            # One machine runs the whole fleet and KMM's Pods, and saturates its API server
            # (requests time out): a long Lease keeps a slow renewal from ending the leader's
            # term mid-measure (failover is the chaos bench's subject, not this one's).
            *LENIENT_LEASE,
            f"--metrics-port={metrics_port}",
            "--metrics-address=127.0.0.1",
        ],
        folder,
        metrics_port,
    )
    world.cleanup.append(coordinator.stop)
    # The simulated agents do not retry a refused connection: start them once it listens.
    wait_for("the coordinator serves gRPC", lambda: listening(grpc_port), 120, poll=0.2)
    agents = [
        agent
        for index, agent in enumerate(world.agents)
        if pool_of(index, args.nodes, args.shards) == pool
    ]
    swarm = SwarmProcesses(
        f"localhost:{grpc_port}", ca.cert_pem, args.reports, agents, args.streams_per_connection
    )
    world.cleanup.append(swarm.stop)
    return Shard(pool, driver_of(pool, args.shards), agents, coordinator, swarm)


def start_shards(world: World, args: argparse.Namespace, root: Path) -> list[Shard]:
    """Every pool's coordinator and agents, all connected, every node Done at OLD. One pool
    after the other, as releases are installed: thousands of TLS handshakes and TokenReviews
    at once on this machine's API server made Lease renewals time out and coordinators stop."""
    ca = certs.make_ca(datetime.datetime.now(datetime.UTC), "bench-grpc-ca")
    shards = []
    for pool in range(args.shards):
        shard = start_shard(world, args, root, pool, ca)
        shards.append(shard)
        try:
            wait_for(
                f"every agent of pool {shard.pool} connected",
                shard.all_connected,
                args.nodes * 0.1 + 60,
            )
        except TimeoutError:
            failures = shard.swarm.failures
            first = [failures.get() for _ in range(min(3, failures.qsize()))]
            print(f"simulated agents failed: {first}", file=sys.stderr)
            raise

    def all_done() -> bool:
        for shard in shards:
            shard.check_running()
        return bool(count_nodes(world.kube, f"{SELECTOR},{names.STATE_LABEL}=Done") >= args.nodes)

    wait_for("every node Done at the old version", all_done, args.nodes * 0.2 + 300, poll=3)
    # An admin's coordinator has mirrored its fleet long before an upgrade: the rollout starts
    # once every node's GPUNode holds its agent's report, not while the mirror still catches
    # up with the agents just connected (at most its 50 writes a second: at 1,000 nodes, 751
    # of the GPUNodes were created inside the measured rollout, beside KMM).
    wait_for(
        "every node's report in its GPUNode",
        lambda: mirrored(world.kube) >= args.nodes,
        args.nodes * 0.1 + 120,
        poll=3,
    )
    return shards


def mirrored(kube: Kube) -> int:
    """How many GPUNodes hold an agent's report."""
    listed = kube.request(
        "GET", path(names.GROUP, names.VERSION, names.GPUNODE_PLURAL), query={"limit": 100000}
    )
    return sum(1 for item in listed.get("items") or [] if (item.get("status") or {}).get("report"))


def summed(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of several coordinators added up, key by key."""
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0) + value
    return total


def step_totals(shards: list[Shard]) -> dict[str, tuple[float, float]]:
    """(seconds, nodes) per rollout step, over every coordinator."""
    totals: dict[str, tuple[float, float]] = {}
    for shard in shards:
        for phase, (seconds, count) in shard.coordinator.step_totals().items():
            before = totals.get(phase, (0.0, 0.0))
            totals[phase] = (before[0] + seconds, before[1] + count)
    return totals


def metric(shards: list[Shard], name: str) -> float:
    return sum(shard.coordinator.metric(name) for shard in shards)


def rollout_passes(shards: list[Shard]) -> tuple[float, float]:
    """The coordinators' rollout passes so far and the seconds they took in all
    (gpuctl_rollout_pass_seconds, coordinator/rollout/metrics.py)."""
    return (
        metric(shards, "gpuctl_rollout_pass_seconds_count"),
        metric(shards, "gpuctl_rollout_pass_seconds_sum"),
    )


def cpu_seconds(shards: list[Shard]) -> list[float]:
    return [shard.coordinator.cpu_seconds() for shard in shards]
