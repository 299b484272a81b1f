"""One coordinator, a fleet of kwok nodes: a rollout at maxUnavailable 10 %, and its costs.

    .venv/bin/python -m bench.fleet_scale [--nodes 500] [--delay 5] [--reports 2]
        [--streams-per-connection 100] [--shards 1]

A real control plane (tests/harness) with kube-scheduler, the Deployment/ReplicaSet
controllers and kwok (tests/harness/node_lifecycle.py) holds N kwok Nodes, each with one GPU
(`gpu.intel.com/xe`) and a Running GPU pod of one Deployment placed there by the scheduler,
and an agent Pod with a bound token. N simulated agents (bench.agent_swarm, TLS, processes of
500, 100 streams per HTTP/2 connection unless `--streams-per-connection` says otherwise: real
agents make one connection each, which costs the server more memory, docs/benchmarks.md)
hold one stream each to ONE `gpuctl-coordinator` process (real watches, the GPUNode mirror,
the rollout; bench.fleet_coordinator counts its API requests).
The KMM emulator (tests/harness/kmm_emulator.py) runs every worker `--delay` seconds after it
is created. Every node starts Done at the old version; the GPUDriver then asks for the new
one with `maxUnavailable: 10%` and `evictGPUPods: true`, and the bench watches the Nodes.

Printed: total time against the floor (waves x the fastest node's own time, which a
saturated coordinator inflates; and waves x KMM's two delayed workers per node), the
node-to-node handoff (a node Done -> the next node in Checking, pairing each start after
the first wave with the Done that freed its slot) p50/p99, API requests per node by kind,
the coordinator's peak RSS (VmHWM) and CPU seconds, GPUNode writes, and then, all sessions
open, reports/s ingested (each agent sends `--reports` changed reports at once; the per-agent
report limit is lifted, as capacity is the question). The bound (nodes cordoned or in a
step at most 10 %) is checked on every Node event.

`--shards K` splits the fleet into K node pools (label `bench-pool`), as docs/deploying.md#sharding
says an admin does past one process's size: a GPUDriver per pool, and K coordinators, each
with `--node-selector` and `--gpudriver-selector` for its pool, its own Lease and its own
agents. The figures are then the fleet's (requests, writes, CPU summed; handoffs per pool) and
each coordinator's peak RSS.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.agent_swarm import STREAMS_PER_CONNECTION, SwarmProcesses, agent_token
from bench.fleet_observe import Coordinator, RolloutWatch, handoffs, listening, wait_for
from bench.timing import Timings
from coordinator.drivers.module_spec import desired_module, kmm_version, module_name
from coordinator.kube.client import MERGE_PATCH, Kube, path
from coordinator.rollout.controller import kmm_labels
from gpuctl.common import names
from gpuctl.common.names import KMM_GROUP, KMM_VERSION
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from tests.harness import certs
from tests.harness.access import KubeCluster
from tests.harness.binaries import find_binaries
from tests.harness.cluster import repository_root, start_cluster
from tests.harness.kmm_emulator import KmmEmulator
from tests.harness.kwok import find_kwok
from tests.harness.node_lifecycle import start_node_lifecycle
from tests.harness.nodes import node_status
from tests.harness.ports import free_loopback_ports
from tests.support.kwok_nodes import GPU_RESOURCE, gpu_deployment

NAMESPACE = "fleet"
DRIVER = "gpu"
SELECTOR = "bench=fleet"
POOL_LABEL = "bench-pool"
AGENT_SA = "gpuctl-agent"
OLD_VERSION = "v6.17.13.62_260409.8"
NEW_VERSION = "v7.1.4.6_260728.7"  # the backport tag bench.agent_swarm's reports carry
# kwok renews each Lease every LEASE/4 s: at 5,000 nodes 33 writes/s, like kubelets with a
# 10 min status period and far below a real cluster's 10 s renewals; nothing here needs
# NotReady, so the node monitor's grace period is longer than any run.
LEASE_SECONDS = 600
GRACE_SECONDS = 7200
UNLIMITED_REPORTS_PER_MINUTE = 1_000_000


def pool_of(index: int, nodes: int, shards: int) -> int:
    """The pool of the fleet's `index`th node: K contiguous runs of names."""
    return index * shards // nodes


def pool_name(pool: int) -> str:
    return f"p{pool}"


def driver_of(pool: int, shards: int) -> str:
    """A pool's GPUDriver: "gpu" for the whole fleet when it is not sharded."""
    return DRIVER if shards == 1 else f"{DRIVER}-{pool_name(pool)}"


def spec(version: str, pool: int | None = None) -> dict[str, Any]:
    """The GPUDriver spec, for the whole fleet or (`pool`) for one pool's nodes."""
    selector = {"bench": "fleet"}
    if pool is not None:
        selector[POOL_LABEL] = pool_name(pool)
    return {
        "nodeSelector": selector,
        "kernelModule": {
            "version": version,
            "kernelMappings": [{"regexp": "^.+$", "containerImage": "registry.example.com/xe:1"}],
        },
        "rollout": {
            "maxUnavailable": "10%",
            "holdAfterFirstNode": False,
            "evictGPUPods": True,
            "timeouts": {"check": "10m", "drain": "10m", "prepare": "10m", "load": "10m"},
        },
    }


OLD, NEW = kmm_version(spec(OLD_VERSION)), kmm_version(spec(NEW_VERSION))


# -- the fleet ----------------------------------------------------------------------------


def create_fleet(cluster: KubeCluster, count: int, shards: int) -> list[tuple[str, str]]:
    """`count` kwok Nodes in `shards` pools, labelled and targeted at OLD by their pool's
    GPUDriver, with one GPU, an agent Pod on each and its bound token; returns (node, token)
    pairs."""
    now = datetime.datetime.now(datetime.UTC)
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: "1"}
    local = threading.local()

    def one(index: int) -> tuple[str, str]:
        if not hasattr(local, "kube"):
            local.kube = Kube(cluster.admin_client())
        kube: Kube = local.kube
        node = f"fleet-{index:05d}"
        pool = pool_of(index, count, shards)
        driver = driver_of(pool, shards)
        node_labels = {
            "kubernetes.io/arch": "amd64",
            "bench": "fleet",
            POOL_LABEL: pool_name(pool),
            names.TARGET_LABEL: driver,
            kmm_labels(NAMESPACE, module_name(driver)).version: OLD,
        }
        kube.request(
            "POST",
            path("", "v1", "nodes"),
            body={"metadata": {"name": node, "labels": node_labels}},
        )
        status = {
            **node_status("6.8.0-45-generic", now),
            "capacity": resources,
            "allocatable": resources,
        }
        kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node, subresource="status"),
            body={"status": status},
            content_type=MERGE_PATCH,
        )
        return node, agent_token(kube, NAMESPACE, AGENT_SA, node)

    with ThreadPoolExecutor(6) as pool:
        return list(pool.map(one, range(count)))


def count_nodes(kube: Kube, selector: str) -> int:
    listed = kube.request(
        "GET", path("", "v1", "nodes"), query={"labelSelector": selector, "limit": 10000}
    )
    return len(listed.get("items") or [])


def running_gpu_pods(kube: Kube) -> int:
    listed = kube.request(
        "GET",
        path("", "v1", "pods", namespace=NAMESPACE),
        query={"labelSelector": "app=train", "fieldSelector": "status.phase=Running"},
    )
    return len(listed.get("items") or [])


# -- one run --------------------------------------------------------------------------------


@dataclass
class World:
    """What one run started, stopped last first by `close`."""

    kube: Kube
    cluster: KubeCluster
    agents: list[tuple[str, str]] = field(default_factory=list)
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for step in reversed(self.cleanup):
            try:
                step()
            except Exception as err:
                print(f"cleanup: {err}", file=sys.stderr)


def start_world(args: argparse.Namespace, root: Path, figures: dict[str, Any]) -> World:
    """The control plane, kwok and its controllers, the fleet with a GPU pod on every node."""
    repo = repository_root()
    kwok_binary = find_kwok(repo, os.environ)
    kube_folder = find_binaries(repo, os.environ).apiserver.parent
    control_plane, cluster = start_cluster(
        root / "cluster",
        repo,
        os.environ,
        datetime.datetime.now(datetime.UTC),
        die_with_parent=True,
    )
    world = World(Kube(cluster.admin_client()), cluster, cleanup=[control_plane.stop])
    try:
        lifecycle = start_node_lifecycle(
            control_plane.layout,
            kube_folder=kube_folder,
            kwok_binary=kwok_binary,
            die_with_parent=True,
            grace_seconds=GRACE_SECONDS,
            lease_seconds=LEASE_SECONDS,
        )
        world.cleanup.append(lifecycle.stop)
        kube = world.kube
        kube.request("POST", path("", "v1", "namespaces"), body={"metadata": {"name": NAMESPACE}})
        kube.request(
            "POST",
            path("", "v1", "serviceaccounts", namespace=NAMESPACE),
            body={"metadata": {"name": AGENT_SA}},
        )
        started = time.perf_counter()
        world.agents = create_fleet(cluster, args.nodes, args.shards)
        gpu_deployment(
            kube, NAMESPACE, "train", replicas=args.nodes, node_selector={"bench": "fleet"}
        )
        wait_for(
            "a Running GPU pod on every node",
            lambda: running_gpu_pods(kube) >= args.nodes,
            args.nodes * 0.5 + 300,
            poll=5,
        )
        figures["setup_seconds"] = time.perf_counter() - started
        print(
            f"setup: {args.nodes} kwok nodes, agent pods, tokens and GPU pods in "
            f"{figures['setup_seconds']:.0f} s",
            flush=True,
        )
    except BaseException:
        world.close()
        raise
    return world


def loaded_at_old(world: World, nodes: int, shards: int) -> None:
    """The fleet as a finished rollout left it: each pool's GPUDriver, the Module the
    coordinator would write, and KMM's labels saying the old version is loaded, before the
    coordinators start."""
    kube = world.kube
    ready: list[str] = []
    for pool in range(shards):
        driver = driver_of(pool, shards)
        metadata: dict[str, Any] = {"name": driver}
        if shards > 1:
            metadata["labels"] = {POOL_LABEL: pool_name(pool)}
        created = kube.request(
            "POST",
            path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
            body={
                "apiVersion": names.API_VERSION,
                "kind": "GPUDriver",
                "metadata": metadata,
                "spec": spec(OLD_VERSION, pool if shards > 1 else None),
            },
        )
        module = desired_module(created, NAMESPACE)
        assert module is not None
        module["spec"]["moduleLoader"]["container"]["version"] = OLD
        kube.request(
            "POST", path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=NAMESPACE), body=module
        )
        ready.append(kmm_labels(NAMESPACE, module_name(driver)).version_ready)
    wait_for(
        "KMM reports the old version everywhere",
        lambda: sum(count_nodes(kube, f"{SELECTOR},{label}={OLD}") for label in ready) >= nodes,
        nodes * 0.2 + 300,
        poll=3,
    )


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
    return shards


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


def cpu_seconds(shards: list[Shard]) -> list[float]:
    return [shard.coordinator.cpu_seconds() for shard in shards]


def roll_out(world: World, shards: list[Shard], nodes: int, delay: float) -> dict[str, Any]:
    """Every pool's GPUDriver to the new version; the figures of the rollout that follows."""
    kube = world.kube
    watch = RolloutWatch(kube, SELECTOR, NEW)
    counts_before = summed([shard.coordinator.counts() for shard in shards])
    cpu_before = cpu_seconds(shards)
    mirror_before = metric(shards, "gpuctl_gpunode_writes")
    steps_before = step_totals(shards)
    begin = time.perf_counter()
    for shard in shards:
        kube.request(
            "PATCH",
            path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=shard.driver),
            body={"spec": {"kernelModule": {"version": NEW_VERSION}}},
            content_type=MERGE_PATCH,
        )

    def all_done() -> bool:
        for shard in shards:
            shard.check_running()
        return len(watch.done) >= nodes

    wait_for("every node Done at the new version", all_done, nodes * delay * 2 + 1200, poll=0.5)
    elapsed = max(watch.done.values()) - begin
    watch.stop()
    counts_after = summed([shard.coordinator.counts() for shard in shards])
    steps_after = step_totals(shards)
    step_means = {}
    for phase, (total, count) in steps_after.items():
        total_before, count_before = steps_before.get(phase, (0.0, 0.0))
        if count > count_before:
            step_means[phase] = (total - total_before) / (count - count_before)
    bound = sum(shard.bound for shard in shards)
    waves = max(math.ceil(len(shard.agents) / shard.bound) for shard in shards)
    per_node = Timings(
        "a node's own time", tuple(watch.done[n] - watch.started[n] for n in watch.done)
    )
    window = {k: counts_after.get(k, 0) - counts_before.get(k, 0) for k in counts_after}
    gaps = [
        gap
        for shard in shards
        for gap in handoffs(watch, shard.bound, {node for node, _ in shard.agents}).seconds
    ]
    return {
        "bound": bound,
        "total_seconds": elapsed,
        "fastest_node_seconds": min(per_node.seconds),
        "median_node_seconds": per_node.median,
        "waves": waves,
        "floor_seconds": waves * min(per_node.seconds),
        # A version change is two KMM workers per node (the unloader, then the loader).
        "floor_delay_seconds": waves * 2 * delay,
        "handoff": Timings("handoff", tuple(gaps)),
        "most_unavailable": watch.most_unavailable,
        "requests_per_node": sum(window.values()) / nodes,
        "requests_by_kind": {k: v for k, v in sorted(window.items()) if v},
        "gpunode_writes": metric(shards, "gpuctl_gpunode_writes") - mirror_before,
        "cpu_seconds_rollout": [
            after - before for after, before in zip(cpu_seconds(shards), cpu_before, strict=True)
        ],
        "pods_running_after": running_gpu_pods(kube),
        "step_means": step_means,
    }


def ingest(shards: list[Shard], nodes: int, reports: int) -> float:
    """Reports per second the coordinators accept when every agent sends `reports` at once."""
    accepted = metric(shards, "gpuctl_agent_reports")
    started = time.perf_counter()
    for shard in shards:
        shard.swarm.go()
    expected = accepted + nodes * reports
    wait_for(
        "every changed report accepted",
        lambda: metric(shards, "gpuctl_agent_reports") >= expected,
        600,
        poll=0.05,
    )
    return nodes * reports / (time.perf_counter() - started)


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "shards": args.shards,
        "streams_per_connection": args.streams_per_connection,
    }
    world = start_world(args, root, figures)
    try:
        emulator = KmmEmulator(world.cluster.admin_client(), NAMESPACE)
        emulator.start()
        world.cleanup.append(emulator.stop)
        loaded_at_old(world, args.nodes, args.shards)
        shards = start_shards(world, args, root)
        for node, _ in world.agents:
            emulator.delay_node(node, args.delay)
        print("fleet Done at the old version; rolling out the new one", flush=True)
        figures.update(roll_out(world, shards, args.nodes, args.delay))
        figures["reports_per_second"] = ingest(shards, args.nodes, args.reports)
        figures["cpu_seconds_total"] = cpu_seconds(shards)
        figures["peak_rss_kb"] = [s.coordinator.memory_kb("VmHWM") for s in shards]
        figures["rss_kb"] = [s.coordinator.memory_kb("VmRSS") for s in shards]
        figures["violations"] = len(emulator.unloads_while_busy())
        figures["handshake_retries"] = sum(s.swarm.handshake_retries for s in shards)
    finally:
        world.close()
    return figures


def _mib(kb: list[int]) -> str:
    return ", ".join(f"{k / 1024:.0f}" for k in kb)


def describe(f: dict[str, Any]) -> str:
    handoff: Timings = f["handoff"]
    over = f["total_seconds"] / f["floor_seconds"] - 1
    kinds = ", ".join(f"{k} {v / f['nodes']:.2f}" for k, v in f["requests_by_kind"].items())
    who = (
        "one coordinator"
        if f["shards"] == 1
        else f"{f['shards']} coordinators, one per pool of ~{f['nodes'] // f['shards']} nodes"
    )
    each = "" if f["shards"] == 1 else " each"
    return "\n".join(
        [
            f"{f['nodes']} kwok nodes, maxUnavailable 10% ({f['bound']}), {who}, "
            f"{f['streams_per_connection']} agent streams per connection:",
            f"  total {f['total_seconds']:.1f} s; floor {f['floor_seconds']:.1f} s "
            f"({f['waves']} waves x the fastest node's "
            f"{f['fastest_node_seconds']:.2f} s; median node {f['median_node_seconds']:.2f} s; "
            f"waves x KMM's two delayed workers alone {f['floor_delay_seconds']:.0f} s); "
            f"over the floor {over * 100:.1f} %",
            f"  handoff (a node Done -> the next node Checking): p50 "
            f"{handoff.median * 1e3:.0f} ms, p99 {handoff.percentile(99) * 1e3:.0f} ms over "
            f"{len(handoff.seconds)}",
            f"  most unavailable at once: {f['most_unavailable']} (bound {f['bound']})",
            "  a node's steps, mean s (the coordinators' gpuctl_rollout_step_seconds): "
            + ", ".join(f"{phase} {mean:.2f}" for phase, mean in f["step_means"].items()),
            f"  API requests per node: {f['requests_per_node']:.1f} ({kinds})",
            f"  GPUNode writes during the rollout: {f['gpunode_writes']:.0f} "
            f"({f['gpunode_writes'] / f['nodes']:.2f} per node)",
            f"  coordinator{'s' if f['shards'] > 1 else ''}: peak RSS{each} "
            f"{_mib(f['peak_rss_kb'])} MiB (now {_mib(f['rss_kb'])} MiB); CPU{each} "
            + ", ".join(f"{c:.1f}" for c in f["cpu_seconds_rollout"])
            + " s in the rollout, "
            + ", ".join(f"{c:.1f}" for c in f["cpu_seconds_total"])
            + " s in all",
            f"  reports ingested: {f['reports_per_second']:,.0f}/s (all sessions open); "
            f"simulated agents' handshakes tried again: {f['handshake_retries']}",
            f"  GPU pods Running afterwards: {f['pods_running_after']}; unloads while busy: "
            f"{f['violations']}",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--delay", type=float, default=5.0, help="KMM worker delay (s)")
    parser.add_argument("--reports", type=int, default=2, help="changed reports per agent")
    parser.add_argument(
        "--streams-per-connection",
        type=int,
        default=STREAMS_PER_CONNECTION,
        help="agent streams sharing one HTTP/2 connection (1: one per agent, as on real nodes)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="node pools, each with its own GPUDriver and coordinator (docs/deploying.md#sharding)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not 1 <= args.shards <= args.nodes:
        parser.error("--shards must be from 1 to --nodes")
    root = Path(tempfile.mkdtemp(prefix="gpuctl-bench-fleet-"))
    try:
        figures = run(args, root)
    except BaseException:
        print(f"coordinator logs kept: {root}/shard-*/coordinator.log", file=sys.stderr)
        raise
    print(describe(figures))
    if args.json:
        serial = {**figures, "handoff": list(figures["handoff"].seconds)}
        args.json.write_text(json.dumps(serial, indent=1))
        memory = root / "shard-0" / "api-counts.memory.txt"  # with GPUCTL_BENCH_TRACEMALLOC
        if memory.exists():
            shutil.copy(memory, args.json.with_suffix(".memory.txt"))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
