"""`gpuctl-agent run` as a real process: TLS to the test coordinator, JSON logs, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from testbed.fakehost import FakeHost
from testbed.harness.ports import free_loopback_ports
from testbed.harness.waiting import wait_until
from tests.agent_daemon.fake_coordinator import MakeCoordinator
from tests.agent_daemon.harness import NODE, TOKEN, Pki, welcome

AGENT = Path(sys.executable).with_name("gpuctl-agent")


def agent_environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    environment["NODE_NAME"] = NODE
    return environment


def test_run_reports_over_tls_logs_json_and_exits_0_on_sigterm(
    host: FakeHost, token_file: Path, pki: Pki, make_coordinator: MakeCoordinator
) -> None:
    coordinator = make_coordinator(welcome(heartbeat=0.2), pki=pki)
    health_port, grpc_health_port = free_loopback_ports(2)
    process = subprocess.Popen(
        [
            str(AGENT),
            "run",
            "--coordinator",
            coordinator.target,
            "--ca-file",
            str(pki.ca_file),
            "--token-file",
            str(token_file),
            "--host-root",
            str(host.root),
            "--health-address",
            "127.0.0.1",
            "--health-port",
            str(health_port),
            "--grpc-health-port",
            str(grpc_health_port),
            "--no-udev",
        ],
        env=agent_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        (report,) = coordinator.wait_reports(1)
        stream = coordinator.streams[0]
        coordinator.wait_for("a heartbeat", stream.heartbeats)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert stdout == b""
    assert report.report.node_name == NODE
    assert stream.metadata["authorization"] == f"Bearer {TOKEN}"
    wait_until("the coordinator saw the stream end", lambda: stream.ended)
    lines = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    assert {line["node"] for line in lines} == {NODE}
    messages = [line["msg"] for line in lines]
    assert messages[0] == "agent started"
    assert "connected to the coordinator" in messages
    assert messages[-2:] == ["stopping", "stopped"]
    assert not [line for line in lines if line["level"] in ("error", "critical")]


def test_bad_usage_is_one_line_and_exit_2(host: FakeHost, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(AGENT), "run", *args],
            env=agent_environment(),
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )

    missing_root = run("--coordinator", "127.0.0.1:1", "--host-root", str(tmp_path / "absent"))
    assert (missing_root.returncode, missing_root.stderr) == (
        2,
        f"gpuctl-agent: {tmp_path / 'absent'}: does not exist\n",
    )
    mixed = run("--coordinator", "127.0.0.1:1", "--insecure", "--ca-file", "ca.pem")
    assert mixed.returncode == 2
    assert mixed.stderr == (
        "gpuctl-agent: --insecure means plaintext: it cannot be combined with --ca-file or "
        "--tls-server-name\n"
    )
    no_target = run("--host-root", str(host.root))
    assert no_target.returncode == 2
    assert "the following arguments are required: --coordinator" in no_target.stderr


def test_the_one_shot_inspect_does_not_pay_for_grpc() -> None:
    """`gpuctl node inspect --local` runs `python -m agent inspect`: the daemon's flags are in
    its parser, but grpc, pyudev and the event loop are imported only for `run`."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, agent.__main__; "
            "heavy = ('grpc', 'pyudev', 'agent.daemon.runner'); "
            "print(sorted(m for m in heavy if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert done.stdout == "[]\n"
