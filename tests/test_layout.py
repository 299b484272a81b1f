"""The repository's layout holds: the test bed (testbed/), hack/ and bench/ need nothing from
tests/. import-linter checks the Python modules (pyproject.toml); this checks the scripts it
cannot see, hack/'s executables, which run Python modules by name."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# `python -m tests.x`, or a path into tests/ that a script runs or reads.
USES_TESTS = re.compile(r"-m\s+tests\.|(?<![\w.-])tests/[\w/.-]+\.(py|sh|yaml)\b")


def scripts() -> list[Path]:
    found = []
    for folder in ("hack", "bench"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix != ".py" and path.read_bytes()[:2] == b"#!":
                found.append(path)
    return found


def test_the_scripts_of_hack_and_bench_run_nothing_from_tests() -> None:
    assert scripts(), "no script found: the check would pass on nothing"
    offenders = [
        f"{path.relative_to(REPO)}: {line.strip()}"
        for path in scripts()
        for line in path.read_text(errors="replace").splitlines()
        if not line.lstrip().startswith("#") and USES_TESTS.search(line)
    ]
    assert offenders == []


def test_the_check_catches_a_script_that_runs_a_test_module() -> None:
    assert USES_TESTS.search("exec .venv/bin/python -m tests.demo")
    assert USES_TESTS.search('python "tests/support/helper.py"')
    assert not USES_TESTS.search("exec .venv/bin/python -m testbed.demo")
    assert not USES_TESTS.search("pytest -q tests/")
