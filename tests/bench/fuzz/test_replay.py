"""The fuzz targets in CI: every seed and every input that once found a bug
(bench/fuzz/regressions/<target>/) replayed through its target, and a two-second real
atheris run of one target through the runner, so the harness itself keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.fuzz.__main__ import REGRESSIONS
from bench.fuzz.targets import TARGETS, fuzz_function, load, seeds


def inputs(name: str) -> list[tuple[str, bytes]]:
    found = [(f"seed-{i}", data) for i, data in enumerate(seeds(load(name)))]
    directory = REGRESSIONS / name
    if directory.is_dir():
        found += [(path.name, path.read_bytes()) for path in sorted(directory.iterdir())]
    return found


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seeds_and_regressions_replay_cleanly(name: str) -> None:
    fuzz_one = fuzz_function(load(name))
    for label, data in inputs(name):
        try:
            fuzz_one(data)
        except Exception as error:  # the report names the input that broke
            raise AssertionError(f"{name} {label}: {error!r}") from error


def test_the_regressions_are_there() -> None:
    assert sorted(p.name for p in (REGRESSIONS / "inspection").iterdir())


def test_a_short_real_fuzzing_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fuzz",
            "--seconds",
            "2",
            "--targets",
            "debugfs_clients",
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = done.stdout.splitlines()[1].split()
    assert row[0] == "debugfs_clients"
    executions, coverage = int(row[1]), int(row[3])
    assert executions > 100
    assert coverage > 0
