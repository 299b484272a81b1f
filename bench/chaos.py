"""The long chaos run: a rollout of many nodes under many faults; per fault: count, invariant
violations (must be 0) and time to recover.

    nice -n 10 .venv/bin/python -m bench.chaos --kills 100 [--nodes 24] [--each 5] [--seed N]

A control plane of its own (testbed/harness), real KMM (its manager and webhook server, and a
kubelet for its Pods), real `gpuctl-agent` processes on fake node roots and two
`gpuctl-coordinator` replicas; the run and its checks are testbed/chaos/run.py (the
short run in CI is tests/integration/chaos/test_chaos.py).
`--kills` SIGKILLs of the coordinator: every fifth kills every replica, the others the
leader (the standby takes the Lease over under load); `--each` of every other fault kind,
one agent gone for good. Prints a table and a JSON line; exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from testbed.chaos.run import ChaosPlan, ChaosReport, run_chaos
from testbed.chaos.world import chaos_world
from testbed.harness.cluster import repository_root, start_cluster


def plan(kills: int, each: int, nodes: int, seed: int) -> ChaosPlan:
    everyone = kills // 5
    return ChaosPlan(
        counts={
            "kill-leader": kills - everyone,
            "kill-all": everyone,
            "apiserver-restart": each,
            "etcd-restart": each,
            "watch-expired": each,
            "agent-cut": each,
            "agent-restart": each,
            "agent-gone": 1,
            "clock-skew": each,
        },
        nodes=nodes,
        seed=seed,
    )


def _seconds(value: object) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_report(report: ChaosReport) -> None:
    print(
        f"{'fault':<18}{'count':>6}{'violations':>11}{'inject p50 s':>13}"
        f"{'leader p50/max s':>18}{'never':>6}{'progress p50/max s':>20}"
    )
    for row in report.table():
        print(
            f"{row['fault']:<18}{row['count']:>6}{row['violations']:>11}"
            f"{_seconds(row['inject_p50']):>13}"
            f"{_seconds(row['leader_p50']) + '/' + _seconds(row['leader_max']):>18}"
            f"{row['leader_never']:>6}"
            f"{_seconds(row['progress_p50']) + '/' + _seconds(row['progress_max']):>20}"
        )
    print(
        f"rounds {report.rounds}, {report.seconds:.0f} s; node-watch breaches "
        f"{len(report.breaches)}, unloads while busy {len(report.unloads_while_busy)}, "
        f"nodes not ending explicit {len(report.unsettled)}; watch relists after 410 "
        f"{report.relists}; coordinator exits {report.coordinator_exits}; KMM kubelet passes "
        f"failed (retried) {report.kubelet_errors}"
    )
    for line in report.breaches + report.unloads_while_busy:
        print("VIOLATION", line)
    for node, state in report.unsettled.items():
        print("UNSETTLED", node, state)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--each", type=int, default=5, help="count of every other fault kind")
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuctl-bench-chaos-"))
    plane, cluster = start_cluster(
        root / "cluster",
        repository_root(),
        os.environ,
        datetime.datetime.now(datetime.UTC),
        die_with_parent=True,
    )
    try:
        with chaos_world(plane, cluster, root) as world:
            report = run_chaos(
                world,
                plan(args.kills, args.each, args.nodes, args.seed),
                say=lambda line: print(line, file=sys.stderr, flush=True),
            )
    finally:
        cluster.close_clients()
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)
    print_report(report)
    print(json.dumps({"table": report.table(), "violations": report.violations}))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
