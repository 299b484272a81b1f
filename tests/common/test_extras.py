"""gpuctl.common.extras: which distributions an extra adds, read from Requires-Dist lines, and
the one-line error of a program started without its extra."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from gpuctl.common import extras
from gpuctl.common.build_version import DISTRIBUTION

REQUIRES = [
    "grpcio==1.85.1",
    'kubernetes==37.0.2; extra == "coordinator"',
    "pydantic==2.14.3 ; extra == 'coordinator'",
    'kubernetes==37.0.2; extra == "cli"',
    'pyyaml>=6.0.3; extra == "cli"',
    'pytest==9.2.0; python_version >= "3.11" and extra == "dev"',
]


def test_an_extra_adds_only_its_own_distributions() -> None:
    assert extras.extra_distributions(REQUIRES, "coordinator") == ["kubernetes", "pydantic"]
    assert extras.extra_distributions(REQUIRES, "cli") == ["kubernetes", "pyyaml"]
    assert extras.extra_distributions(REQUIRES, "dev") == ["pytest"]
    assert extras.extra_distributions(REQUIRES, "nope") == []


def test_missing_names_what_is_not_installed() -> None:
    installed = {"grpcio", "kubernetes"}
    missing = extras.missing_for_extra("coordinator", REQUIRES, lambda name: name in installed)
    assert missing == ["pydantic"]
    assert extras.missing_for_extra("coordinator", REQUIRES, lambda _name: True) == []


def test_this_checkouts_extras_are_installed() -> None:
    # hack/setup installs .[dev,coordinator,cli]; the real metadata says what each extra needs.
    for extra in ("coordinator", "cli", "dev"):
        assert extras.missing_for_extra(extra) == []
    assert "kubernetes" in extras.extra_distributions(
        metadata.requires(DISTRIBUTION) or [], "coordinator"
    )


def test_a_missing_extra_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        extras.require_extra(
            "gpuctl-coordinator", "coordinator", REQUIRES, lambda name: name != "kubernetes"
        )
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "gpuctl-coordinator: needs gpuctl's `coordinator` extra (kubernetes not installed): "
        "pip install 'gpuctl-xe[coordinator]'\n"
    )


def test_an_installed_extra_returns_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    extras.require_extra("gpuctl", "cli", REQUIRES, lambda _name: True)
    assert capsys.readouterr().err == ""


def test_the_distribution_name_is_pyprojects_and_not_the_unrelated_gpuctl() -> None:
    """`gpuctl` on PyPI is someone else's project: every `pip install` line gpuctl prints names
    the distribution pyproject.toml builds."""
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["name"] == DISTRIBUTION
    assert DISTRIBUTION != "gpuctl"
    assert metadata.version(DISTRIBUTION)  # the installed one is found by that name
