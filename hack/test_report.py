"""Where the test suite's time goes: tables by folder and by fixture from a run's reports.

``hack/test`` writes, per tier, a JUnit report (``<tier>.xml``) and the fixture times of
``tests/support/fixture_times.py`` (``<tier>-fixtures.json``, one per pytest-xdist worker)
under ``.test-reports/``; this prints them as the Markdown tables docs/development.md quotes
(where the time goes):

    .venv/bin/python hack/test_report.py [.test-reports]

By folder: the tests of each folder (``tests/<part>``, ``tests/integration/<part>``), their
summed time (setup, call and teardown, as JUnit counts it) and share of the whole. By
fixture: the fixtures whose setups and teardowns together took at least a second, how often
each was set up and the seconds spent in its own setup and teardown.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DEFAULT_FOLDER = Path(".test-reports")
INTEGRATION_DEPTH = 3  # tests/integration/<part>
UNIT_DEPTH = 2  # tests/<part>
SHOWN_FIXTURE_SECONDS = 1.0


def folder_of(classname: str) -> str:
    """``tests.integration.rollout.test_x.TestY`` -> ``tests/integration/rollout``."""
    parts = [part for part in classname.split(".") if not part[:1].isupper()]
    modules = parts[:-1]  # the last part is the test module
    depth = INTEGRATION_DEPTH if modules[1:2] == ["integration"] else UNIT_DEPTH
    return "/".join(modules[:depth]) if len(modules) > 1 else "tests"


def folder_times(reports: list[Path]) -> dict[str, tuple[int, float]]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for report in reports:
        for case in ET.parse(report).iter("testcase"):  # noqa: S314 - our own pytest's report
            entry = totals[folder_of(case.get("classname", ""))]
            entry[0] += 1
            entry[1] += float(case.get("time", "0"))
    return {folder: (int(count), seconds) for folder, (count, seconds) in totals.items()}


def fixture_times(files: list[Path]) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for file in files:
        for name, entry in json.loads(file.read_text()).items():
            total = totals.setdefault(
                name, {"setups": 0, "setup_seconds": 0.0, "teardown_seconds": 0.0}
            )
            for key in total:
                total[key] += entry[key]
    return totals


def render(folder: Path) -> str:
    by_folder = folder_times(sorted(folder.glob("*.xml")))
    whole = sum(seconds for _, seconds in by_folder.values()) or 1.0
    lines = ["| folder | tests | seconds | share |", "|---|---:|---:|---:|"]
    for name, (count, seconds) in sorted(by_folder.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| `{name}` | {count} | {seconds:.0f} | {100 * seconds / whole:.1f}% |")
    tests = sum(count for count, _ in by_folder.values())
    lines.append(f"| all | {tests} | {whole:.0f} | 100% |")
    lines += ["", "| fixture | setups | setup s | teardown s |", "|---|---:|---:|---:|"]
    by_fixture = fixture_times(sorted(folder.glob("*-fixtures*.json")))

    def spent(entry: dict[str, float]) -> float:
        return entry["setup_seconds"] + entry["teardown_seconds"]

    for name, entry in sorted(by_fixture.items(), key=lambda kv: -spent(kv[1])):
        if spent(entry) >= SHOWN_FIXTURE_SECONDS:
            lines.append(
                f"| `{name}` | {entry['setups']:.0f} | {entry['setup_seconds']:.0f} "
                f"| {entry['teardown_seconds']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else DEFAULT_FOLDER
    if not any(folder.glob("*.xml")):
        print(f"no JUnit report under {folder}: run hack/test first", file=sys.stderr)
        return 1
    print(render(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
