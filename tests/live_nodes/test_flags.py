"""`gpuctl-coordinator`'s live-node flags: defaults, TLS required, nonsense refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.main import parse_args


def test_without_grpc_port_no_agents_are_served() -> None:
    assert parse_args(["--namespace=gpuctl-system"]).live_nodes is None


def test_defaults(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("cert")
    key.write_text("key")
    args = parse_args(
        ["--namespace=ns", "--grpc-port=8443", f"--tls-cert-file={cert}", f"--tls-key-file={key}"]
    )
    config = args.live_nodes
    assert config.server.port == 8443
    assert config.server.tls.cert_file == cert
    assert config.server.report_freshness_seconds == 30.0
    agents = config.server.agents
    assert agents.audience == "gpuctl.dev/agent"
    assert agents.agent_username == "system:serviceaccount:ns:gpuctl-agent"
    assert (agents.heartbeat_seconds, agents.max_reports_per_minute) == (10.0, 60)


def test_plaintext_only_when_asked_for() -> None:
    config = parse_args(["--namespace=ns", "--grpc-port=0", "--insecure-grpc"]).live_nodes
    assert config.server.tls is None
    assert config.server.insecure


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grpc-port=1"], "--grpc-port needs --tls-secret, or --tls-cert-file"),
        (["--grpc-port=1", "--tls-cert-file=/x"], "go together"),
        (
            ["--grpc-port=1", "--tls-cert-file=/nonexistent", "--tls-key-file=/nonexistent"],
            "--tls-cert-file /nonexistent: no such file",
        ),
        (["--grpc-port=70000", "--insecure-grpc"], "is not a TCP port"),
        (
            ["--grpc-port=1", "--insecure-grpc", "--report-freshness=5"],
            "--report-freshness must be longer than --heartbeat-interval",
        ),
        (["--grpc-port=1", "--insecure-grpc", "--max-reports-per-minute=0"], "at least 1"),
    ],
)
def test_nonsense_is_refused_with_the_reason(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        parse_args(["--namespace=ns", *flags])
    assert raised.value.code == 2
    assert message in capsys.readouterr().err
