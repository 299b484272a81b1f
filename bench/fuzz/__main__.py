"""Run every fuzz target (or some) for a bounded time each and report what happened.

    .venv/bin/python -m bench.fuzz [--seconds 60] [--targets a,b] [--work DIR]

Each target runs in its own process (bench.fuzz.run) under libFuzzer: `-max_total_time`,
`-timeout` (a single input running longer is a hang), `-rss_limit_mb` (memory). Its corpus
lives in DIR/corpus/<target> (default ~/.cache/gpuctl/fuzz), seeded from the target's SEEDS
and bench/fuzz/regressions/<target>, and grows from run to run; a crashing, hanging or
memory-hungry input is written to DIR/findings/<target>/. Printed per target: executions,
executions per second, coverage (libFuzzer's `cov`: instrumented edges of gpuctl's code
reached; `ft`: features), corpus size, and the finding if any. Exit status 1 when any
target found something.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.fuzz.targets import TARGETS, load, seeds

REGRESSIONS = Path(__file__).parent / "regressions"
DEFAULT_WORK = Path.home() / ".cache" / "gpuctl" / "fuzz"
_STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.MULTILINE)
_PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", re.MULTILINE)
_FINDING = re.compile(r"Test unit written to (\S+)")


@dataclass
class Outcome:
    target: str
    executions: int
    seconds: int
    coverage: int
    features: int
    corpus: int
    finding: str


def prepare_corpus(name: str, work: Path) -> Path:
    corpus = work / "corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    inputs = seeds(load(name))
    regressions = REGRESSIONS / name
    if regressions.is_dir():
        inputs += [path.read_bytes() for path in sorted(regressions.iterdir())]
    for data in inputs:
        (corpus / f"seed-{hashlib.sha1(data).hexdigest()}").write_bytes(data)  # noqa: S324
    return corpus


def run_target(name: str, seconds: int, work: Path, rss_mb: int) -> Outcome:
    corpus = prepare_corpus(name, work)
    findings = work / "findings" / name
    findings.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench.fuzz.run",
        name,
        f"-max_total_time={seconds}",
        "-timeout=10",
        f"-rss_limit_mb={rss_mb}",
        "-print_final_stats=1",
        f"-artifact_prefix={findings}/",
        str(corpus),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + 300, check=False
    )
    log = done.stderr
    (work / f"{name}.log").write_text(log)
    stats = {key: int(value) for key, value in _STAT.findall(log)}
    progress = _PROGRESS.findall(log)
    last = progress[-1] if progress else ("0", "0", "0", "0")
    found = _FINDING.search(log)
    finding = ""
    if found:
        reason = next((line for line in log.splitlines() if "ERROR: libFuzzer" in line), "finding")
        finding = f"{reason.split('ERROR: ')[-1]} -> {found.group(1)}"
    elif done.returncode != 0:
        finding = f"exit status {done.returncode} (see {work / (name + '.log')})"
    return Outcome(
        target=name,
        executions=stats.get("number_of_executed_units", int(last[0])),
        seconds=max(stats.get("total_run_time_seconds", seconds), 1),
        coverage=int(last[1]),
        features=int(last[2]),
        corpus=int(last[3]),
        finding=finding,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="per target")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    args = parser.parse_args()
    names = [name for name in args.targets.split(",") if name]
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(TARGETS)}")
    print(f"{'target':<18} {'executions':>11} {'exec/s':>8} {'cov':>6} {'ft':>6} {'corpus':>7}")
    outcomes = []
    for name in names:
        outcome = run_target(name, args.seconds, args.work, args.rss_limit_mb)
        outcomes.append(outcome)
        print(
            f"{name:<18} {outcome.executions:>11} {outcome.executions // outcome.seconds:>8} "
            f"{outcome.coverage:>6} {outcome.features:>6} {outcome.corpus:>7}"
            + (f"  FOUND {outcome.finding}" if outcome.finding else ""),
            flush=True,
        )
    return 1 if any(o.finding for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
