"""A pytest plugin that writes how long each fixture's setup and teardown took, summed over
the run, so docs/development.md can say where the time goes by fixture (measured).

``-p tests.support.fixture_times --fixture-times=PATH`` (``hack/test`` passes both) writes a
JSON object ``{fixture: {"setups": n, "setup_seconds": s, "teardown_seconds": t}}`` at the end
of the run. A fixture's setup time excludes the fixtures it requests (pytest sets those up
before it calls ``pytest_fixture_setup``); its teardown is timed from the first of its own
finalizers to the end of ``finish``. ``hack/test_report.py`` turns it into the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

OPTION = "--fixture-times"
_totals: dict[str, dict[str, float]] = {}
_teardown_started: dict[int, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION, default=None, help="write each fixture's summed setup and teardown time (JSON) here"
    )


def _entry(name: str) -> dict[str, float]:
    return _totals.setdefault(name, {"setups": 0, "setup_seconds": 0.0, "teardown_seconds": 0.0})


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: Any, request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    started = time.monotonic()
    try:
        return (yield)
    finally:
        entry = _entry(fixturedef.argname)
        entry["setups"] += 1
        entry["setup_seconds"] += time.monotonic() - started
        # Finalizers run last-in first-out: this one runs before the fixture's own teardown.
        fixturedef.addfinalizer(
            lambda: _teardown_started.__setitem__(id(fixturedef), time.monotonic())
        )


def pytest_fixture_post_finalizer(fixturedef: Any, request: pytest.FixtureRequest) -> None:
    started = _teardown_started.pop(id(fixturedef), None)
    if started is not None:
        _entry(fixturedef.argname)["teardown_seconds"] += time.monotonic() - started


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Writes the totals; under pytest-xdist each worker its own file (``NAME.gw0.json``, ...),
    the controller, which sets no fixture up, none."""
    target = session.config.getoption(OPTION)
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if target and _totals:
        path = Path(target)
        if worker:
            path = path.with_name(f"{path.stem}.{worker}{path.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_totals, indent=1, sort_keys=True) + "\n")
