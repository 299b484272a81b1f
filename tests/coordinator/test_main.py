"""The command line and the JSON log format."""

from __future__ import annotations

import json
import logging

import pytest

from coordinator.json_logs import JsonFormatter
from coordinator.main import parse_args


def test_help_explains_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--kubeconfig", "--namespace", "--lease-name", "--lease-duration"):
        assert flag in out
    assert "KMM Modules" in out


def test_renew_deadline_must_be_shorter_than_lease(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--lease-duration", "5", "--renew-deadline", "5"])
    assert exit_info.value.code == 2
    assert "--renew-deadline" in capsys.readouterr().err


def test_defaults() -> None:
    args = parse_args([])
    assert args.kubeconfig is None
    assert args.lease_name == "gpuctl-coordinator"
    assert args.events_namespace == "default"


def test_json_log_line_carries_extra_fields() -> None:
    record = logging.LogRecord("coordinator.x", logging.INFO, "f.py", 1, "hello %s", ("you",), None)
    record.gpudriver = "gpu-policy"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "hello you"
    assert line["level"] == "info"
    assert line["logger"] == "coordinator.x"
    assert line["gpudriver"] == "gpu-policy"
    assert line["time"].endswith("+00:00")
