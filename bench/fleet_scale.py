"""A fleet of kwok nodes under one coordinator (or one per pool): a rollout at 10 %, its costs.

    .venv/bin/python -m bench.fleet_scale [--nodes 500] [--delay 5] [--reports 2]
        [--streams-per-connection 100] [--shards 1]

A real control plane (testbed/harness) with kube-scheduler, the Deployment/ReplicaSet
controllers and kwok (testbed/harness/node_lifecycle.py) holds N kwok Nodes, each with one GPU
(`gpu.intel.com/xe`) and a Running GPU pod of one Deployment placed there by the scheduler,
and an agent Pod with a bound token. N simulated agents (bench.agent_swarm, TLS, processes of
500, 100 streams per HTTP/2 connection unless `--streams-per-connection` says otherwise: real
agents make one connection each, which costs the server more memory, docs/benchmarks.md)
hold one stream each to ONE `gpuctl-coordinator` process (real watches, the GPUNode mirror,
the rollout; bench.fleet_coordinator counts its API requests).
KMM's own operator (bench.kmm_fleet: its manager built from source, its worker Pods run by
the test kubelet over a fake host per node) loads and unloads; each worker Pod starts
`--delay` seconds after it is created (a pull and a container start on a real node). Every
node starts Done at the old version; the GPUDriver then asks for the new one with
`maxUnavailable: 10%` and `evictGPUPods: true`, and the bench watches the Nodes. Then the
coordinators stop and the same KMM takes the same nodes one version further the way KMM's docs
describe (bench.kmm_floor: the Module changed, version labels flipped in batches of the same
bound, no checks): the floor.

Printed: gpuctl's total time against that floor (and against waves x the fastest node's own
time, which a saturated coordinator inflates), a node's own time against KMM's own time for
a node (label -> ready in the floor run), the node-to-node handoff (a node Done -> the next
node in Checking, pairing each start after the first wave with the Done that freed its slot)
p50/p99, API requests per node by kind, the coordinator's peak RSS (VmHWM) and CPU seconds,
GPUNode writes, KMM's manager's own work per node in both runs (its reconciles by controller,
its controllers' queue waits and reconcile durations, and its CPU seconds, bench.kmm_work), how
busy the machine's CPUs were in each run (bench.machine_cpu), where a node's time goes in each
run, stretch by stretch between gpuctl's steps, KMM's manager and KMM's worker Pods, and how
long the version took to reach its first node (bench.kmm_timeline), and then, all sessions
open, reports/s ingested (each agent sends `--reports` changed reports at once; the per-agent
report limit is lifted, as capacity is the question); and the kernel boundary's count of unloads
on a busy node. The bound (nodes cordoned or in a step at most 10 %) is checked on every Node
event.

`--shards K` splits the fleet into K node pools (label `bench-pool`), as docs/deploying.md#sharding
says an admin does past one process's size: a GPUDriver per pool, and K coordinators, each
with `--node-selector` and `--gpudriver-selector` for its pool, its own Lease and its own
agents. The figures are then the fleet's (requests, writes, CPU summed; handoffs per pool) and
each coordinator's peak RSS; the floor run is made for one pool only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agent_swarm import STREAMS_PER_CONNECTION
from bench.fleet_observe import RolloutWatch, handoffs, wait_for
from bench.fleet_shards import Shard, cpu_seconds, metric, start_shards, step_totals, summed
from bench.fleet_world import (
    FLOOR,
    FLOOR_VERSION,
    NAMESPACE,
    NEW,
    NEW_VERSION,
    OLD_VERSION,
    SELECTOR,
    World,
    image_of,
    loaded_at_old,
    running_gpu_pods,
    spec,
    start_world,
)
from bench.kmm_fleet import KmmFleet
from bench.kmm_floor import floor_upgrade
from bench.kmm_timeline import Seen, Timeline, fleet_start, side_by_side, stretches
from bench.kmm_work import KmmWork, kmm_work
from bench.machine_cpu import busy, cpu_times
from bench.timing import Timings
from coordinator.kube.client import MERGE_PATCH, path
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import module_name
from gpuctl.rollout.rollout_input import kmm_labels


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
            # The new version and its image, as an admin's upgrade changes both.
            body={"spec": {"kernelModule": spec(NEW_VERSION)["kernelModule"]}},
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


def timeline(world: World, shard: Shard, kmm_version: str, state_version: str | None) -> Timeline:
    """The moments of each node's upgrade to `kmm_version` from now on (bench.kmm_timeline)."""
    return Timeline(
        world.kube,
        selector=SELECTOR,
        namespace=NAMESPACE,
        labels=kmm_labels(NAMESPACE, module_name(shard.driver)),
        kmm_version=kmm_version,
        state_version=state_version,
    )


def floor(world: World, shards: list[Shard]) -> dict[str, Any]:
    """The coordinators stopped, the same upgrade by KMM's docs on the same nodes and KMM."""
    for shard in shards:
        shard.swarm.stop()
        shard.coordinator.stop()
    (shard,) = shards
    moments, cpu_before = timeline(world, shard, FLOOR, None), cpu_times()
    run = floor_upgrade(
        world.kube,
        namespace=NAMESPACE,
        module=module_name(shard.driver),
        nodes=[node for node, _ in shard.agents],
        selector=SELECTOR,
        batch=shard.bound,
        version=FLOOR,
        image=image_of(FLOOR_VERSION),
    )
    return {
        "floor_kmm_seconds": run.seconds,
        "floor_kmm_batches": run.batches,
        "kmm_node": run.per_node,
        "machine_busy_floor": busy(cpu_before, cpu_times()),
        **_seen("floor", moments.stop()),
    }


def _seen(run: str, seen: Seen) -> dict[str, Any]:
    """A Timeline's figures for `run` ("rollout" or "floor")."""
    return {
        f"stretches_{run}": stretches(seen.nodes),
        f"fleet_start_{run}": fleet_start(seen.nodes, seen.fleet, seen.begin),
    }


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "shards": args.shards,
        "streams_per_connection": args.streams_per_connection,
        "delay": args.delay,
    }
    world = start_world(args, root, figures)
    try:
        fleet = KmmFleet(world.cluster.admin_client(), world.cluster.kubeconfig, NAMESPACE, root)
        fleet.__enter__()
        world.cleanup.append(lambda: fleet.__exit__(None, None, None))
        for version in (OLD_VERSION, NEW_VERSION, FLOOR_VERSION):
            fleet.publish(image_of(version), version)
        for node, _ in world.agents:
            fleet.host(node)
        started = time.perf_counter()
        loaded_at_old(world, args.nodes, args.shards)
        figures["first_load_seconds"] = time.perf_counter() - started
        print(
            f"KMM loaded the old version on {args.nodes} nodes in "
            f"{figures['first_load_seconds']:.0f} s",
            flush=True,
        )
        shards = start_shards(world, args, root)
        for node, _ in world.agents:
            fleet.kmm.delay_node(node, args.delay)
        print("fleet Done at the old version; rolling out the new one", flush=True)
        kmm_port = fleet.kmm.operator.metrics_port
        kmm_before, cpu_before = kmm_work(kmm_port), cpu_times()
        moments = timeline(world, shards[0], NEW, NEW) if args.shards == 1 else None
        figures.update(roll_out(world, shards, args.nodes, args.delay))
        figures["kmm_work_rollout"] = kmm_work(kmm_port).since(kmm_before)
        figures["machine_busy_rollout"] = busy(cpu_before, cpu_times())
        if moments is not None:
            figures.update(_seen("rollout", moments.stop()))
        figures["reports_per_second"] = ingest(shards, args.nodes, args.reports)
        figures["cpu_seconds_total"] = cpu_seconds(shards)
        figures["peak_rss_kb"] = [s.coordinator.memory_kb("VmHWM") for s in shards]
        figures["rss_kb"] = [s.coordinator.memory_kb("VmRSS") for s in shards]
        figures["handshake_retries"] = sum(s.swarm.handshake_retries for s in shards)
        if args.shards == 1:
            print("gpuctl done; the same upgrade the way KMM's docs describe", flush=True)
            kmm_before = kmm_work(kmm_port)
            figures.update(floor(world, shards))
            figures["kmm_work_floor"] = kmm_work(kmm_port).since(kmm_before)
        figures["violations"] = len(fleet.kmm.unloads_while_busy())
        figures["kubelet_errors"] = len(fleet.kmm.kubelet.errors)
    finally:
        world.close()
    return figures


def _mib(kb: list[int]) -> str:
    return ", ".join(f"{k / 1024:.0f}" for k in kb)


def _kmm_work_lines(rollout: KmmWork, floor_run: KmmWork, nodes: int) -> list[str]:
    """KMM's manager's own work per node in gpuctl's rollout and in the floor (bench/kmm_work),
    and how long its controllers' items waited in their queues and took to reconcile."""
    names = sorted(n for n in {*rollout.reconciles, *floor_run.reconciles} if n)
    counts = ", ".join(
        f"{name} {rollout.reconciles.get(name, 0) / nodes:.1f} vs "
        f"{floor_run.reconciles.get(name, 0) / nodes:.1f}"
        for name in names
        if rollout.reconciles.get(name) or floor_run.reconciles.get(name)
    )

    def waits(work: KmmWork, name: str) -> str:
        queued, worked = work.queued.mean(name), work.worked.mean(name)
        if queued is None or worked is None:
            return "-"
        return f"{queued * 1e3:.0f} / {worked * 1e3:.0f} ms"

    queues = ", ".join(
        f"{name} {waits(rollout, name)} vs {waits(floor_run, name)}"
        for name in sorted({*rollout.queued.count, *floor_run.queued.count})
        if rollout.queued.count.get(name) or floor_run.queued.count.get(name)
    )
    return [
        f"  KMM's manager per node, gpuctl's rollout vs the floor: CPU "
        f"{rollout.cpu_seconds / nodes:.3f} vs {floor_run.cpu_seconds / nodes:.3f} s; "
        f"reconciles {counts}",
        f"  KMM's controllers, mean wait in the queue / mean reconcile, gpuctl's rollout vs the "
        f"floor: {queues}",
    ]


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
    floor_lines = []
    if "floor_kmm_seconds" in f:
        kmm_node: Timings = f["kmm_node"]
        ratio = f["total_seconds"] / f["floor_kmm_seconds"]
        floor_lines = [
            f"  the same upgrade the way KMM's docs describe (no coordinator; version labels in "
            f"{f['floor_kmm_batches']} batches of {f['bound']}, no checks): "
            f"{f['floor_kmm_seconds']:.1f} s; gpuctl / that floor: {ratio:.3f} "
            f"({(ratio - 1) * 100:+.1f} %)",
            f"  a node: gpuctl median {f['median_node_seconds']:.2f} s (checks, cordon, drain, "
            f"KMM, verification); KMM's own (label -> ready) median {kmm_node.median:.2f} s, "
            f"p99 {kmm_node.percentile(99):.2f} s",
            *_kmm_work_lines(f["kmm_work_rollout"], f["kmm_work_floor"], f["nodes"]),
            f"  the machine's CPUs busy (all its processes, /proc/stat): "
            f"{f['machine_busy_rollout'] * 100:.0f} % in gpuctl's rollout, "
            f"{f['machine_busy_floor'] * 100:.0f} % in the floor",
            "  where a node's time goes (bench.kmm_timeline; moments as the bench's watches saw "
            "them):",
            *side_by_side(f["stretches_rollout"], f["stretches_floor"]),
            f"    the version asked, then (gpuctl): {f['fleet_start_rollout']}",
            f"    the version asked, then (floor): {f['fleet_start_floor']}",
        ]
    return "\n".join(
        [
            f"{f['nodes']} kwok nodes, maxUnavailable 10% ({f['bound']}), {who}, "
            f"{f['streams_per_connection']} agent streams per connection:",
            f"  total {f['total_seconds']:.1f} s; floor {f['floor_seconds']:.1f} s "
            f"({f['waves']} waves x the fastest node's "
            f"{f['fastest_node_seconds']:.2f} s; median node {f['median_node_seconds']:.2f} s; "
            f"waves x KMM's two delayed workers alone {f['floor_delay_seconds']:.0f} s); "
            f"over the floor {over * 100:.1f} %",
            *floor_lines,
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
            f"{f['violations']}; KMM's first load of the fleet {f['first_load_seconds']:.0f} s; "
            f"kubelet errors {f['kubelet_errors']}",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument(
        "--delay", type=float, default=5.0, help="seconds before each KMM worker Pod starts"
    )
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
        for key in ("kmm_work_rollout", "kmm_work_floor"):
            if key in figures:
                serial[key] = dataclasses.asdict(figures[key])
        for key in ("stretches_rollout", "stretches_floor"):
            if key in figures:
                serial[key] = {
                    f.stretch.label: list(f.timings.seconds) if f.timings else []
                    for f in figures[key]
                }
        if "kmm_node" in figures:
            serial["kmm_node"] = list(figures["kmm_node"].seconds)
        args.json.write_text(json.dumps(serial, indent=1))
        memory = root / "shard-0" / "api-counts.memory.txt"  # with GPUCTL_BENCH_TRACEMALLOC
        if memory.exists():
            shutil.copy(memory, args.json.with_suffix(".memory.txt"))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
