"""What the rollout's per-node metrics cost a pass at fleet size, against writing every series.

    .venv/bin/python -m bench.rollout_metrics [--nodes 5000] [--runs 30]

Every rollout pass hands RolloutMetrics.record the phase and driver version of each node of
its GPUDriver (gpuctl_node_rollout_phase, gpuctl_node_driver_version_info: two series per
node). Measured, interleaved on the same registry size:

- subject: a pass in which one node moved (its phase changed), as nearly every pass of a
  rollout is: only the moved node's series are written;
- baseline: a pass that writes every node's two series, which is what each pass cost when
  every series was set again (and what the first pass of a coordinator still costs);
- for scale: one scrape of the registry (prometheus_client's text exposition of those
  10,000 series), which Prometheus asks for every scrape interval.

Printed: median and p95 per pass and the ratio subject / baseline. No assertion on time.
"""

from __future__ import annotations

import argparse
import itertools

from prometheus_client import CollectorRegistry, generate_latest

from bench.timing import measure, measure_interleaved, ratio_line
from coordinator.rollout.metrics import RolloutMetrics
from gpuctl.common.names import Phase

DRIVER = "gpu"
CYCLE = (Phase.PENDING, Phase.CHECKING, Phase.DRAINING, Phase.DONE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    names = [f"gpu-node-{i:05d}" for i in range(args.nodes)]
    versions = dict.fromkeys(names, "v7.1.4.6_260728.7")
    one_moves = RolloutMetrics(CollectorRegistry())
    all_move = RolloutMetrics(CollectorRegistry())
    phases = dict.fromkeys(names, Phase.PENDING)
    one_moves.record(DRIVER, None, phases, versions, [])
    all_move.record(DRIVER, None, phases, versions, [])
    steps = itertools.cycle(CYCLE)
    movers = itertools.cycle(names)

    def one_node_moved() -> None:
        phases[next(movers)] = next(steps)
        one_moves.record(DRIVER, None, phases, versions, [])

    every_phase = itertools.cycle(CYCLE)

    def every_node_written() -> None:
        all_move.record(DRIVER, None, dict.fromkeys(names, next(every_phase)), versions, [])

    subject, baseline = measure_interleaved(
        {
            f"pass, one node moved ({args.nodes} nodes)": one_node_moved,
            f"pass, every node's series written ({args.nodes} nodes)": every_node_written,
        },
        runs=args.runs,
    )
    registry = CollectorRegistry()
    RolloutMetrics(registry).record(DRIVER, None, phases, versions, [])
    scrape = measure(
        f"one scrape of {2 * args.nodes} node series",
        lambda: generate_latest(registry),
        runs=args.runs,
    )
    for timings in (subject, baseline, scrape):
        print(timings.summary())
    print(ratio_line(subject, baseline))


if __name__ == "__main__":
    main()
