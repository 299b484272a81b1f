"""A fleet of kwok nodes under one coordinator (or one per pool): a rollout at 10 %, its costs.

    .venv/bin/python -m bench.fleet_scale [--nodes 500] [--delay 5] [--reports 2]
        [--streams-per-connection 100] [--shards 1] [--stepped-floor]

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
bound, no checks): the floor. `--stepped-floor` then runs that floor once more to a fourth
version with gpuctl's seven node writes a node added and nothing else (bench.kmm_floor
`step_writes`): what those writes alone cost KMM, whose controllers reconcile a node on any
label change. Last, floor+drain: the same floor to one more version with the two steps of KMM's
docs it leaves out, which no busy node can do without (3: terminate the workload using the
module on the node; 7: restore it), done as `kubectl drain --pod-selector` and `uncordon` do
them and still with no checks (bench.floor_workload): the floor of an upgrade a fleet whose
GPUs are in use can actually take.

Printed: gpuctl's total time against that floor (and against waves x the fastest node's own
time, which a saturated coordinator inflates), a node's own time against KMM's own time for
a node (label -> ready in the floor run), the node-to-node handoff (a node Done -> the next
node in Checking, pairing each start after the first wave with the Done that freed its slot)
p50/p99, API requests per node by kind, the coordinator's peak RSS (VmHWM) and CPU seconds,
GPUNode writes, KMM's manager's own work per node in both runs (its reconciles by controller,
its controllers' queue waits and reconcile durations, and its CPU seconds, bench.kmm_work), how
busy the machine's CPUs were in each run (bench.machine_cpu) and whose CPU time it was, by
process (bench.process_cpu), where a node's time goes in each
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
from bench.fleet_shards import (
    Shard,
    cpu_seconds,
    metric,
    rollout_passes,
    start_shards,
    step_totals,
    summed,
)
from bench.fleet_world import (
    DRAINED_VERSION,
    FLOOR_VERSION,
    NAMESPACE,
    NEW,
    NEW_VERSION,
    OLD_VERSION,
    SELECTOR,
    STEPPED_VERSION,
    WORKLOAD,
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
from bench.process_cpu import cpu_by_name, cpu_words, process_cpu
from bench.timing import Timings
from coordinator.kube.client import MERGE_PATCH, path
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import kmm_version, module_name
from gpuctl.rollout.input.build import kmm_labels


def roll_out(world: World, shards: list[Shard], nodes: int, delay: float) -> dict[str, Any]:
    """Every pool's GPUDriver to the new version; the figures of the rollout that follows."""
    kube = world.kube
    watch = RolloutWatch(kube, SELECTOR, NEW)
    counts_before = summed([shard.coordinator.counts() for shard in shards])
    cpu_before = cpu_seconds(shards)
    mirror_before = metric(shards, "gpuctl_gpunode_writes")
    passes_before = rollout_passes(shards)
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
    passes_after = rollout_passes(shards)
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
        "passes": passes_after[0] - passes_before[0],
        "pass_seconds": passes_after[1] - passes_before[1],
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


# The floors after gpuctl's rollout, in order: run name, version, gpuctl's node writes, drain.
FLOORS = (
    ("floor", FLOOR_VERSION, False, False),
    ("stepped", STEPPED_VERSION, True, False),
    ("drained", DRAINED_VERSION, False, True),
)


def floors(world: World, shards: list[Shard], kmm_port: int, *, stepped: bool) -> dict[str, Any]:
    """The coordinators stopped, the same upgrade by KMM's docs on the same nodes and KMM: the
    floor, floor+writes when `stepped`, and floor+drain; each run's figures and KMM's work."""
    for shard in shards:
        shard.swarm.stop()
        shard.coordinator.stop()
    (shard,) = shards
    figures: dict[str, Any] = {}
    for run, version, step_writes, drain in FLOORS:
        if run == "stepped" and not stepped:
            continue
        print(f"the same upgrade the way KMM's docs describe: {RUNS[run]}", flush=True)
        kmm_before = kmm_work(kmm_port)
        figures.update(floor_run(world, shard, run, version, step_writes=step_writes, drain=drain))
        figures[f"kmm_work_{run}"] = kmm_work(kmm_port).since(kmm_before)
    return figures


def floor_run(
    world: World, shard: Shard, run: str, version: str, *, step_writes: bool, drain: bool = False
) -> dict[str, Any]:
    """The fleet to `version` by KMM's docs (bench.kmm_floor), `run`'s figures; `drain`: with
    their steps 3 and 7, the workload off each node while it changes (bench.floor_workload)."""
    if drain:
        wait_for(
            "a Running GPU pod on every node",
            lambda: running_gpu_pods(world.kube) >= len(shard.agents),
            600,
            poll=1,
        )
    target = kmm_version(spec(version))
    moments, cpu_before = timeline(world, shard, target, None), cpu_times()
    processes_before = process_cpu()
    upgrade = floor_upgrade(
        world.kube,
        namespace=NAMESPACE,
        module=module_name(shard.driver),
        nodes=[node for node, _ in shard.agents],
        selector=SELECTOR,
        batch=shard.bound,
        version=target,
        image=image_of(version),
        step_writes=step_writes,
        workload=WORKLOAD if drain else None,
    )
    return {
        f"{run}_kmm_seconds": upgrade.seconds,
        f"{run}_kmm_batches": upgrade.batches,
        f"{run}_kmm_node": upgrade.per_node,
        f"machine_busy_{run}": busy(cpu_before, cpu_times()),
        f"process_cpu_{run}": cpu_by_name(processes_before, process_cpu()),
        **_seen(run, moments.stop()),
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
        for version in (OLD_VERSION, NEW_VERSION, FLOOR_VERSION, STEPPED_VERSION, DRAINED_VERSION):
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
        processes_before = process_cpu()
        moments = timeline(world, shards[0], NEW, NEW) if args.shards == 1 else None
        figures.update(roll_out(world, shards, args.nodes, args.delay))
        figures["kmm_work_rollout"] = kmm_work(kmm_port).since(kmm_before)
        figures["machine_busy_rollout"] = busy(cpu_before, cpu_times())
        figures["process_cpu_rollout"] = cpu_by_name(processes_before, process_cpu())
        if moments is not None:
            figures.update(_seen("rollout", moments.stop()))
        figures["reports_per_second"] = ingest(shards, args.nodes, args.reports)
        figures["cpu_seconds_total"] = cpu_seconds(shards)
        figures["peak_rss_kb"] = [s.coordinator.memory_kb("VmHWM") for s in shards]
        figures["rss_kb"] = [s.coordinator.memory_kb("VmRSS") for s in shards]
        figures["handshake_retries"] = sum(s.swarm.handshake_retries for s in shards)
        if args.shards == 1 and not args.rollout_only:
            figures.update(floors(world, shards, kmm_port, stepped=args.stepped_floor))
        figures["violations"] = len(fleet.kmm.unloads_while_busy())
        figures["kubelet_errors"] = len(fleet.kmm.kubelet.errors)
    finally:
        world.close()
    return figures


def _mib(kb: list[int]) -> str:
    return ", ".join(f"{k / 1024:.0f}" for k in kb)


def _kmm_work_lines(runs: dict[str, KmmWork], nodes: int) -> list[str]:
    """KMM's manager's own work per node in each run (by name, in order; bench/kmm_work), and
    how long its controllers' items waited in their queues and took to reconcile."""
    order = " vs ".join(runs)
    works = list(runs.values())
    names = sorted({n for work in works for n in work.reconciles if n})
    counts = ", ".join(
        f"{name} " + " vs ".join(f"{work.reconciles.get(name, 0) / nodes:.1f}" for work in works)
        for name in names
        if any(work.reconciles.get(name) for work in works)
    )

    def waits(work: KmmWork, name: str) -> str:
        queued, worked = work.queued.mean(name), work.worked.mean(name)
        if queued is None or worked is None:
            return "-"
        return f"{queued * 1e3:.0f} / {worked * 1e3:.0f} ms"

    queued = sorted({name for work in works for name in work.queued.count})
    queues = ", ".join(
        f"{name} " + " vs ".join(waits(work, name) for work in works)
        for name in queued
        if any(work.queued.count.get(name) for work in works)
    )
    cpu = " vs ".join(f"{work.cpu_seconds / nodes:.3f}" for work in works)
    return [
        f"  KMM's manager per node, {order}: CPU {cpu} s; reconciles {counts}",
        f"  KMM's controllers, mean wait in the queue / mean reconcile, {order}: {queues}",
    ]


RUNS = {
    "rollout": "gpuctl",
    "floor": "floor",
    "stepped": "floor+writes",
    "drained": "floor+drain",
}


def _floor_lines(f: dict[str, Any]) -> list[str]:
    """gpuctl's rollout against the floor (and the floor with gpuctl's writes, when run)."""
    runs = [run for run in RUNS if f"stretches_{run}" in f]
    kmm_node: Timings = f["floor_kmm_node"]
    ratio = f["total_seconds"] / f["floor_kmm_seconds"]
    lines = [
        f"  the same upgrade the way KMM's docs describe (no coordinator; version labels in "
        f"{f['floor_kmm_batches']} batches of {f['bound']}, no checks): "
        f"{f['floor_kmm_seconds']:.1f} s; gpuctl / that floor: {ratio:.3f} "
        f"({(ratio - 1) * 100:+.1f} %)",
    ]
    if "stepped_kmm_seconds" in f:
        stepped = f["stepped_kmm_seconds"]
        lines.append(
            f"  the floor with gpuctl's node writes (six a node) and nothing else (floor+writes, "
            f"bench.kmm_floor step_writes): {stepped:.1f} s; that / the floor: "
            f"{stepped / f['floor_kmm_seconds']:.3f}; gpuctl / that: "
            f"{f['total_seconds'] / stepped:.3f}"
        )
    if "drained_kmm_seconds" in f:
        drained = f["drained_kmm_seconds"]
        lines.append(
            f"  the floor with KMM's docs' steps 3 and 7 (floor+drain: each batch cordoned, its "
            f"GPU pods evicted and gone, then labelled, uncordoned once ready; no checks; "
            f"bench.floor_workload): {drained:.1f} s; that / the floor: "
            f"{drained / f['floor_kmm_seconds']:.3f}; gpuctl / that: "
            f"{f['total_seconds'] / drained:.3f} "
            f"({(f['total_seconds'] / drained - 1) * 100:+.1f} %)"
        )
    lines += [
        f"  a node: gpuctl median {f['median_node_seconds']:.2f} s (checks, cordon, drain, "
        f"KMM, verification); KMM's own (label -> ready) median {kmm_node.median:.2f} s, "
        f"p99 {kmm_node.percentile(99):.2f} s",
        *_kmm_work_lines({RUNS[run]: f[f"kmm_work_{run}"] for run in runs}, f["nodes"]),
        "  the machine's CPUs busy (all its processes, /proc/stat): "
        + ", ".join(f"{f[f'machine_busy_{run}'] * 100:.0f} % ({RUNS[run]})" for run in runs),
        f"  CPU seconds by process (bench.process_cpu), {' vs '.join(RUNS[r] for r in runs)}: "
        + cpu_words({RUNS[run]: f[f"process_cpu_{run}"] for run in runs}),
        "  where a node's time goes (bench.kmm_timeline; moments as the bench's watches saw them):",
        *side_by_side({RUNS[run]: f[f"stretches_{run}"] for run in runs}),
        *(f"    the version asked, then ({RUNS[run]}): {f[f'fleet_start_{run}']}" for run in runs),
    ]
    return lines


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
        floor_lines = _floor_lines(f)
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
            f"  rollout passes (gpuctl_rollout_pass_seconds): {f['passes']:.0f} "
            f"({f['passes'] / f['nodes']:.1f} per node), mean "
            f"{f['pass_seconds'] / max(f['passes'], 1) * 1e3:.1f} ms, "
            f"{f['pass_seconds']:.1f} s in all",
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
    parser.add_argument(
        "--stepped-floor",
        action="store_true",
        help="after the floor, the same upgrade again with gpuctl's seven node writes a node "
        "and nothing else: what those writes alone cost KMM (bench.kmm_floor)",
    )
    parser.add_argument(
        "--rollout-only",
        action="store_true",
        help="gpuctl's rollout without the floors after it (half the time; a ratio then "
        "needs another run's floors, which vary a few per cent from run to run)",
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
        for name in RUNS:
            if f"kmm_work_{name}" in figures:
                serial[f"kmm_work_{name}"] = dataclasses.asdict(figures[f"kmm_work_{name}"])
            if f"stretches_{name}" in figures:
                serial[f"stretches_{name}"] = {
                    f.stretch.label: list(f.timings.seconds) if f.timings else []
                    for f in figures[f"stretches_{name}"]
                }
            if f"{name}_kmm_node" in figures:
                serial[f"{name}_kmm_node"] = list(figures[f"{name}_kmm_node"].seconds)
        args.json.write_text(json.dumps(serial, indent=1))
        memory = root / "shard-0" / "api-counts.memory.txt"  # with GPUCTL_BENCH_TRACEMALLOC
        if memory.exists():
            shutil.copy(memory, args.json.with_suffix(".memory.txt"))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
