"""The command line and the JSON log format."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from coordinator.health import Verdict
from coordinator.main import parse_args
from coordinator.metrics_http import HealthChecks, MetricsServerError, serve_metrics, stop_metrics
from coordinator.rollout.metrics import RolloutMetrics


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
    assert args.resync_period == 60.0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--rollout-blocked-recheck", "0"], "--rollout-blocked-recheck"),
        (["--resync-period", "0"], "--resync-period"),
        (["--metrics-port", "70000"], "--metrics-port"),
    ],
)
def test_bad_rollout_and_metrics_flags_are_refused(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--node-selector", "--gpudriver-selector"])
def test_a_malformed_selector_is_refused_at_start_saying_what_is_wrong(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args([flag, "pool in (a"])
    assert exit_info.value.code == 2
    assert f"argument {flag}: not a label selector: unbalanced '('" in capsys.readouterr().err


def test_the_selectors_are_kept_as_written() -> None:
    args = parse_args(["--node-selector", "gpuctl.dev/pool=a", "--gpudriver-selector", "pool=a"])
    assert (args.node_selector, args.gpudriver_selector) == ("gpuctl.dev/pool=a", "pool=a")


ALWAYS_OK = HealthChecks(lambda: Verdict(True, "test"), lambda: Verdict(True, "test"))


def test_a_metrics_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsServerError, match=f"--metrics-port {port}"):
            serve_metrics("127.0.0.1", port, CollectorRegistry(), ALWAYS_OK)


def test_metrics_are_served_from_the_registry_passed_in() -> None:
    registry = CollectorRegistry()
    RolloutMetrics(registry).record("gpu", {"counts": {"Done": 2}}, {}, {}, [])
    server, thread = serve_metrics("127.0.0.1", 0, registry, ALWAYS_OK)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        stop_metrics(server)
        thread.join(timeout=5)
    assert 'gpuctl_rollout_nodes{gpudriver="gpu",phase="Done"} 2.0' in text
