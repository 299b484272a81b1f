"""`gpuctl-coordinator` as a real process: kubeconfig, JSON logs, clean SIGTERM shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator.kube.client import path
from tests.harness.access import KubeCluster
from tests.harness.waiting import wait_until
from tests.support.cluster_api import (
    TEST_LABEL,
    Api,
    gpudriver,
    simple_spec,
    wait_status,
)

pytestmark = pytest.mark.integration

SCRIPT = Path(sys.executable).parent / "gpuctl-coordinator"


def test_process_reconciles_logs_json_and_stops_cleanly_on_sigterm(
    kube_cluster: KubeCluster, namespace: str, api: Api, tmp_path: Path
) -> None:
    name = f"{namespace}-proc"
    log_path = tmp_path / "coordinator.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                str(SCRIPT),
                f"--kubeconfig={kube_cluster.kubeconfig}",
                f"--namespace={namespace}",
                f"--gpudriver-selector={TEST_LABEL}={namespace}",
                "--identity=proc-1",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
            wait_status(api, name, lambda s: s.get("kmmStatus") == "0/0", "reports 0/0")
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            code = process.wait(timeout=15)
            stopped_after = time.monotonic() - started
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert code == 0
    assert stopped_after < 10
    lease_path = path(
        "coordination.k8s.io", "v1", "leases", namespace=namespace, name="gpuctl-coordinator"
    )
    lease = api.kube.request("GET", lease_path)
    assert lease["spec"]["holderIdentity"] == ""  # released, so a standby takes over at once
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    messages = [line["msg"] for line in lines]
    assert "acquired lease" in messages
    assert "shutting down" in messages
    assert messages[-1] == "stopped"
    assert all({"time", "level", "logger", "msg"} <= set(line) for line in lines)
    wait_until("module still there", lambda: api.get_module(namespace, f"{name}-gpu"))


def test_help_runs_without_a_cluster() -> None:
    result = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "--kubeconfig" in result.stdout


def test_no_configuration_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT), f"--kubeconfig={tmp_path / 'missing'}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 2
    assert "no Kubernetes configuration" in result.stderr
