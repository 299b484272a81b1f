"""The world run: a fleet on KMM's own operator under seeded real-world events; per event kind,
how many were injected, and every invariant breach with the event to replay it from.

    nice -n 10 .venv/bin/python -m bench.world --seed N --events M [--nodes K] [--json FILE]
        [--weight KIND=W ...]
    nice -n 10 .venv/bin/python -m bench.world --replay FILE [--json FILE]

A control plane of its own (testbed/harness), real KMM (its manager and webhook, a kubelet for
its Pods), real `gpuctl-agent` processes on fake node roots and two `gpuctl-coordinator`
replicas. The events and the invariants are testbed/world/ (events.py, invariants.py; the run
is run.py); the short run in CI is tests/integration/chaos/test_world.py. `--schedule FILE`
writes the run's events as JSON, which `--replay FILE` runs again as they were (the weights
too: `--weight KIND=W` sets one kind's, 0 leaves it out); `--mutant NAME`
runs it against a coordinator with a guard switched off, to see it caught. Prints one line
per event kind and one per breach, then a JSON line; exit status 1 on any breach or node left
unsettled once the world was quiet, and then the run's logs are kept (their folder is named).
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

from testbed.chaos.world import chaos_world
from testbed.harness.cluster import repository_root, start_cluster
from testbed.world.mutant import MUTANTS, mutant_command
from testbed.world.plan import (
    KINDS,
    WEIGHTS,
    ScheduleError,
    WorldPlan,
    read_schedule,
    schedule,
)
from testbed.world.plan import write_schedule as save_schedule
from testbed.world.run import WorldReport, run_world


def print_report(report: WorldReport) -> None:
    events = sum(report.injected.values()) + sum(report.idle.values())
    print(f"seed {report.seed}: {events} events, {report.seconds:.0f} s")
    print(f"{'event':<20}{'injected':>9}{'nothing to do':>14}")
    for kind in KINDS:
        print(f"{kind:<20}{report.injected.get(kind, 0):>9}{report.idle.get(kind, 0):>14}")
    for line in report.breaches:
        print("BREACH", line)
    for line in report.raced:
        print("RACED (refused by the kernel, the holder opened just before)", line)
    if report.first_breach_event is not None:
        print(
            f"first breach at event {report.first_breach_event} (replay: --seed {report.seed} "
            "with the same --nodes and --weight, or --replay of its --schedule)"
        )
    for node, state in report.unsettled.items():
        print("UNSETTLED", node, state)
    for node, reason in report.failed.items():
        print("FAILED (with its reason)", node, reason)


def weight(text: str) -> tuple[str, float]:
    """KIND=W, a known kind and a weight of 0 or more."""
    kind, _, value = text.partition("=")
    if kind not in WEIGHTS:
        raise argparse.ArgumentTypeError(f"unknown event kind {kind!r}; known: {', '.join(KINDS)}")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not KIND=W with W a number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a weight is 0 or more")
    return kind, number


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.world",
        description=(__doc__ or "").split("\n\n")[0].replace("\n", " "),
    )
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    parser.add_argument("--events", type=int, default=200, help="how many (default 200)")
    parser.add_argument("--nodes", type=int, default=20, help="the fleet's size (default 20)")
    parser.add_argument(
        "--weight",
        type=weight,
        action="append",
        default=[],
        metavar="KIND=W",
        help="how often KIND is drawn against the others (testbed/world/plan.py WEIGHTS); "
        "repeatable",
    )
    parser.add_argument("--replay", type=Path, metavar="FILE", help="run a written schedule")
    parser.add_argument("--schedule", type=Path, metavar="FILE", help="write the schedule")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    parser.add_argument(
        "--mutant",
        choices=sorted(MUTANTS),
        help="run coordinators with this guard switched off (testbed/world/mutant.py), to see "
        "the run catch it; the run stops at the first breach",
    )
    args = parser.parse_args()
    if args.replay:
        try:
            plan, events = read_schedule(args.replay)
        except ScheduleError as err:
            parser.error(str(err))
    else:
        weights = {**WEIGHTS, **dict(args.weight)}
        plan = WorldPlan(seed=args.seed, events=args.events, nodes=args.nodes, weights=weights)
        events = schedule(plan)
    if args.schedule:
        save_schedule(plan, events, args.schedule)
    root = Path(tempfile.mkdtemp(prefix="gpuctl-bench-world-"))
    plane, cluster = start_cluster(
        root / "cluster",
        repository_root(),
        os.environ,
        datetime.datetime.now(datetime.UTC),
        die_with_parent=True,
    )
    report = WorldReport(plan.seed)
    try:
        with chaos_world(plane, cluster, root) as world:
            if args.mutant:
                world.rig.coordinator_command = mutant_command(args.mutant)
            report = run_world(
                world,
                plan,
                events,
                stop_at_first_breach=bool(args.mutant),
                say=lambda line: print(line, file=sys.stderr, flush=True),
            )
    finally:
        cluster.close_clients()
        plane.stop()
    failed = bool(report.breaches or report.unsettled)
    if failed:
        # The coordinator's, KMM's and the kubelet's logs, to read the breach in.
        print(f"logs kept in {root}", file=sys.stderr)
    else:
        shutil.rmtree(root, ignore_errors=True)
    print_report(report)
    table = report.table()
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(table))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
