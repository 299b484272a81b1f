"""The reconciler's known issues of a GPUDriver, with each node's wanted answer kept and without.

    .venv/bin/python -m bench.known_issues [--nodes 300 1000] [--asks 200]

The reconciler (coordinator/drivers/reconciler.py) works out a GPUDriver's known issues
(gpuctl/gpudriver/known_issues.py) on every reconcile, from every Node the cache holds, and
during a rollout it reconciles on the fleet's node changes, most of that work finding again
which nodes the GPUDriver wants (profiled: docs/benchmarks/notes-fleet-2026-12-05.md). The
fleet is bench.rollout_pass's mid-rollout snapshot; between two asks one node moves a step at a
new resourceVersion, as one watch event makes a reconcile.

- subject: known_issues given the wanted nodes from a WantedMemo (gpuctl/gpudriver/wanted_memo.py),
  as the reconciler asks it;
- baseline: known_issues finding them afresh.

Asks alternate between the two (bench.timing.measure_interleaved), each on its own copy of the
fleet with the same changes; both answers are checked equal on the way. Prints the median and
p95 per ask and the ratio.
"""

from __future__ import annotations

import argparse
import sys

from bench.rollout_pass import SPEC, Fleet, fleet
from bench.timing import measure_interleaved, ratio_line
from gpuctl.gpudriver.known_issues import KnownIssue, known_issues
from gpuctl.gpudriver.wanted_memo import WantedMemo


def ask(world: Fleet, memo: WantedMemo | None, answers: list[tuple[KnownIssue, ...]]) -> None:
    """One watch event, then the reconciler's known issues of the fleet."""
    world.step()
    wanted = memo.wanted(SPEC, world.nodes) if memo is not None else None
    answers.append(known_issues(SPEC, world.nodes, wanted))


def run(count: int, asks: int) -> None:
    kept, fresh, memo = fleet(count), fleet(count), WantedMemo()
    with_memo: list[tuple[KnownIssue, ...]] = []
    without: list[tuple[KnownIssue, ...]] = []
    subject, baseline = measure_interleaved(
        {
            "wanted kept": lambda: ask(kept, memo, with_memo),
            "wanted found afresh": lambda: ask(fresh, None, without),
        },
        runs=asks,
    )
    if with_memo != without:
        sys.exit(f"{count} nodes: the known issues with the memo differ from those without it")
    reused = memo.reused / max(1, memo.reused + memo.asked)
    print(f"{count} nodes, {asks} asks, one node changed between asks:")
    print(f"  {subject.summary()} ({reused:.1%} of nodes' wanted answers kept)")
    print(f"  {baseline.summary()}")
    print(f"  {ratio_line(subject, baseline)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--asks", type=int, default=200)
    args = parser.parse_args(argv)
    for count in args.nodes:
        run(count, args.asks)


if __name__ == "__main__":
    main()
