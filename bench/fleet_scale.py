"""One coordinator, a fleet of kwok nodes: a rollout at maxUnavailable 10 %, and its costs.

    .venv/bin/python -m bench.fleet_scale [--nodes 500] [--delay 5] [--reports 2]
        [--streams-per-connection 100]

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
from coordinator.drivers.module_spec import desired_module, kmm_version
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
MODULE = f"{DRIVER}-gpu"
SELECTOR = "bench=fleet"
AGENT_SA = "gpuctl-agent"
OLD_VERSION = "v6.17.13.62_260409.8"
NEW_VERSION = "v7.1.4.6_260728.7"  # the backport tag bench.agent_swarm's reports carry
# kwok renews each Lease every LEASE/4 s: at 5,000 nodes 33 writes/s, like kubelets with a
# 10 min status period and far below a real cluster's 10 s renewals; nothing here needs
# NotReady, so the node monitor's grace period is longer than any run.
LEASE_SECONDS = 600
GRACE_SECONDS = 7200
UNLIMITED_REPORTS_PER_MINUTE = 1_000_000


def spec(version: str) -> dict[str, Any]:
    return {
        "nodeSelector": {"bench": "fleet"},
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


def create_fleet(cluster: KubeCluster, count: int) -> list[tuple[str, str]]:
    """`count` kwok Nodes labelled and targeted at OLD with one GPU, an agent Pod on each
    and its bound token; returns (node, token) pairs."""
    labels = kmm_labels(NAMESPACE, MODULE)
    now = datetime.datetime.now(datetime.UTC)
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: "1"}
    local = threading.local()

    def one(index: int) -> tuple[str, str]:
        if not hasattr(local, "kube"):
            local.kube = Kube(cluster.admin_client())
        kube: Kube = local.kube
        node = f"fleet-{index:05d}"
        node_labels = {
            "kubernetes.io/arch": "amd64",
            "bench": "fleet",
            names.TARGET_LABEL: DRIVER,
            labels.version: OLD,
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
        world.agents = create_fleet(cluster, args.nodes)
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


def loaded_at_old(world: World, emulator: KmmEmulator, nodes: int) -> None:
    """The fleet as a finished rollout left it: the GPUDriver, the Module the coordinator would
    write, and KMM's labels saying the old version is loaded, before the coordinator starts."""
    kube = world.kube
    created = kube.request(
        "POST",
        path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
        body={
            "apiVersion": names.API_VERSION,
            "kind": "GPUDriver",
            "metadata": {"name": DRIVER},
            "spec": spec(OLD_VERSION),
        },
    )
    module = desired_module(created, NAMESPACE)
    assert module is not None
    module["spec"]["moduleLoader"]["container"]["version"] = OLD
    kube.request("POST", path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=NAMESPACE), body=module)
    labels = kmm_labels(NAMESPACE, MODULE)
    wait_for(
        "KMM reports the old version everywhere",
        lambda: count_nodes(kube, f"{SELECTOR},{labels.version_ready}={OLD}") >= nodes,
        nodes * 0.2 + 300,
        poll=3,
    )


def start_coordinator(
    world: World, args: argparse.Namespace, root: Path
) -> tuple[Coordinator, SwarmProcesses]:
    """The coordinator, and one simulated agent per node connected to it."""
    ca = certs.make_ca(datetime.datetime.now(datetime.UTC), "bench-grpc-ca")
    serving = certs.make_serving_cert(ca, datetime.datetime.now(datetime.UTC))
    (root / "tls.crt").write_bytes(serving.cert_pem)
    (root / "tls.key").write_bytes(serving.key_pem)
    grpc_port, metrics_port = free_loopback_ports(2)
    coordinator = Coordinator(
        [
            f"--kubeconfig={world.cluster.kubeconfig}",
            f"--namespace={NAMESPACE}",
            "--identity=fleet-bench",
            f"--grpc-port={grpc_port}",
            "--grpc-address=127.0.0.1",
            f"--tls-cert-file={root / 'tls.crt'}",
            f"--tls-key-file={root / 'tls.key'}",
            f"--agent-service-account=system:serviceaccount:{NAMESPACE}:{AGENT_SA}",
            f"--max-reports-per-minute={UNLIMITED_REPORTS_PER_MINUTE}",
            f"--metrics-port={metrics_port}",
            "--metrics-address=127.0.0.1",
        ],
        root,
        metrics_port,
    )
    world.cleanup.append(coordinator.stop)
    # The simulated agents do not retry a refused connection: start them once it listens.
    wait_for("the coordinator serves gRPC", lambda: listening(grpc_port), 120, poll=0.2)
    swarm = SwarmProcesses(
        f"localhost:{grpc_port}",
        ca.cert_pem,
        args.reports,
        world.agents,
        args.streams_per_connection,
    )
    world.cleanup.append(swarm.stop)
    try:
        wait_for(
            "every agent connected",
            lambda: coordinator.metric("gpuctl_agent_sessions") >= args.nodes,
            args.nodes * 0.1 + 60,
        )
    except TimeoutError:
        failures = [swarm.failures.get() for _ in range(min(3, swarm.failures.qsize()))]
        print(f"simulated agents failed: {failures}", file=sys.stderr)
        raise
    wait_for(
        "every node Done at the old version",
        lambda: count_nodes(world.kube, f"{SELECTOR},{names.STATE_LABEL}=Done") >= args.nodes,
        args.nodes * 0.2 + 300,
        poll=3,
    )
    return coordinator, swarm


def roll_out(world: World, coordinator: Coordinator, nodes: int, delay: float) -> dict[str, Any]:
    """The GPUDriver to the new version; the figures of the rollout that follows."""
    kube = world.kube
    watch = RolloutWatch(kube, SELECTOR, NEW)
    counts_before = coordinator.counts()
    cpu_before = coordinator.cpu_seconds()
    mirror_before = coordinator.metric("gpuctl_gpunode_writes")
    steps_before = coordinator.step_totals()
    begin = time.perf_counter()
    kube.request(
        "PATCH",
        path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=DRIVER),
        body={"spec": {"kernelModule": {"version": NEW_VERSION}}},
        content_type=MERGE_PATCH,
    )
    wait_for(
        "every node Done at the new version",
        lambda: len(watch.done) >= nodes,
        nodes * delay * 2 + 1200,
        poll=0.5,
    )
    elapsed = max(watch.done.values()) - begin
    watch.stop()
    counts_after = coordinator.counts()
    steps_after = coordinator.step_totals()
    step_means = {}
    for phase, (total, count) in steps_after.items():
        total_before, count_before = steps_before.get(phase, (0.0, 0.0))
        if count > count_before:
            step_means[phase] = (total - total_before) / (count - count_before)
    bound = max(1, math.floor(nodes * 0.10))
    per_node = Timings(
        "a node's own time", tuple(watch.done[n] - watch.started[n] for n in watch.done)
    )
    window = {k: counts_after.get(k, 0) - counts_before.get(k, 0) for k in counts_after}
    return {
        "bound": bound,
        "total_seconds": elapsed,
        "fastest_node_seconds": min(per_node.seconds),
        "median_node_seconds": per_node.median,
        "floor_seconds": math.ceil(nodes / bound) * min(per_node.seconds),
        # A version change is two KMM workers per node (the unloader, then the loader).
        "floor_delay_seconds": math.ceil(nodes / bound) * 2 * delay,
        "handoff": handoffs(watch, bound),
        "most_unavailable": watch.most_unavailable,
        "requests_per_node": sum(window.values()) / nodes,
        "requests_by_kind": {k: v for k, v in sorted(window.items()) if v},
        "gpunode_writes": coordinator.metric("gpuctl_gpunode_writes") - mirror_before,
        "cpu_seconds_rollout": coordinator.cpu_seconds() - cpu_before,
        "pods_running_after": running_gpu_pods(kube),
        "step_means": step_means,
    }


def ingest(coordinator: Coordinator, swarm: SwarmProcesses, nodes: int, reports: int) -> float:
    """Reports per second the coordinator accepts when every agent sends `reports` at once."""
    accepted = coordinator.metric("gpuctl_agent_reports")
    started = time.perf_counter()
    swarm.go()
    expected = accepted + nodes * reports
    wait_for(
        "every changed report accepted",
        lambda: coordinator.metric("gpuctl_agent_reports") >= expected,
        600,
        poll=0.05,
    )
    return nodes * reports / (time.perf_counter() - started)


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "streams_per_connection": args.streams_per_connection,
    }
    world = start_world(args, root, figures)
    try:
        emulator = KmmEmulator(world.cluster.admin_client(), NAMESPACE)
        emulator.start()
        world.cleanup.append(emulator.stop)
        loaded_at_old(world, emulator, args.nodes)
        coordinator, swarm = start_coordinator(world, args, root)
        for node, _ in world.agents:
            emulator.delay_node(node, args.delay)
        print("fleet Done at the old version; rolling out the new one", flush=True)
        figures.update(roll_out(world, coordinator, args.nodes, args.delay))
        figures["reports_per_second"] = ingest(coordinator, swarm, args.nodes, args.reports)
        figures["cpu_seconds_total"] = coordinator.cpu_seconds()
        figures["peak_rss_kb"] = coordinator.memory_kb("VmHWM")
        figures["rss_kb"] = coordinator.memory_kb("VmRSS")
        figures["violations"] = len(emulator.unloads_while_busy())
        figures["handshake_retries"] = swarm.handshake_retries
    finally:
        world.close()
    return figures


def describe(f: dict[str, Any]) -> str:
    handoff: Timings = f["handoff"]
    over = f["total_seconds"] / f["floor_seconds"] - 1
    kinds = ", ".join(f"{k} {v / f['nodes']:.2f}" for k, v in f["requests_by_kind"].items())
    return "\n".join(
        [
            f"{f['nodes']} kwok nodes, maxUnavailable 10% ({f['bound']}), one coordinator, "
            f"{f['streams_per_connection']} agent streams per connection:",
            f"  total {f['total_seconds']:.1f} s; floor {f['floor_seconds']:.1f} s "
            f"({math.ceil(f['nodes'] / f['bound'])} waves x the fastest node's "
            f"{f['fastest_node_seconds']:.2f} s; median node {f['median_node_seconds']:.2f} s; "
            f"waves x KMM's two delayed workers alone {f['floor_delay_seconds']:.0f} s); "
            f"over the floor {over * 100:.1f} %",
            f"  handoff (a node Done -> the next node Checking): p50 "
            f"{handoff.median * 1e3:.0f} ms, p99 {handoff.percentile(99) * 1e3:.0f} ms over "
            f"{len(handoff.seconds)}",
            f"  most unavailable at once: {f['most_unavailable']} (bound {f['bound']})",
            "  a node's steps, mean s (the coordinator's gpuctl_rollout_step_seconds): "
            + ", ".join(f"{phase} {mean:.2f}" for phase, mean in f["step_means"].items()),
            f"  API requests per node: {f['requests_per_node']:.1f} ({kinds})",
            f"  GPUNode writes during the rollout: {f['gpunode_writes']:.0f} "
            f"({f['gpunode_writes'] / f['nodes']:.2f} per node)",
            f"  coordinator: peak RSS {f['peak_rss_kb'] / 1024:.0f} MiB (now "
            f"{f['rss_kb'] / 1024:.0f} MiB); CPU {f['cpu_seconds_rollout']:.1f} s in the rollout, "
            f"{f['cpu_seconds_total']:.1f} s in all",
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
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuctl-bench-fleet-"))
    try:
        figures = run(args, root)
    except BaseException:
        print(f"coordinator log kept: {root / 'coordinator.log'}", file=sys.stderr)
        raise
    print(describe(figures))
    if args.json:
        serial = {**figures, "handoff": list(figures["handoff"].seconds)}
        args.json.write_text(json.dumps(serial, indent=1))
        memory = root / "api-counts.memory.txt"  # with GPUCTL_BENCH_TRACEMALLOC set
        if memory.exists():
            shutil.copy(memory, args.json.with_suffix(".memory.txt"))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
