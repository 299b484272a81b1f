"""`gpuctl-coordinator` as a real process: kubeconfig, JSON logs, clean SIGTERM shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from coordinator.kube.client import path
from testbed.cluster_api import (
    TEST_LABEL,
    Api,
    gpudriver,
    simple_spec,
    wait_status,
)
from testbed.harness.access import KubeCluster
from testbed.harness.ports import free_loopback_ports
from testbed.harness.waiting import wait_until

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


def probe(url: str) -> tuple[int, str]:
    """(HTTP status, body) of a probe URL; (0, why) when nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback http
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


@contextmanager
def coordinator_process(
    kube_cluster: KubeCluster, namespace: str, identity: str, metrics_port: int, log_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                str(SCRIPT),
                f"--kubeconfig={kube_cluster.kubeconfig}",
                f"--namespace={namespace}",
                f"--gpudriver-selector={TEST_LABEL}={namespace}",
                f"--identity={identity}",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={metrics_port}",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_leader_and_standby_are_alive_and_ready(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """kubelet's probes: the leader is ready once its caches are synced, the standby (which
    reads the Lease and could take over) is ready too, and both are alive."""
    first_port, second_port = free_loopback_ports(2)
    with ExitStack() as stack:
        stack.enter_context(
            coordinator_process(kube_cluster, namespace, "a", first_port, tmp_path / "a.log")
        )
        wait_until(
            "the first replica leads with synced caches",
            lambda: (
                probe(f"http://127.0.0.1:{first_port}/readyz")
                == (200, "ok: leading, caches synced\n")
            ),
            timeout_seconds=120,
        )
        stack.enter_context(
            coordinator_process(kube_cluster, namespace, "b", second_port, tmp_path / "b.log")
        )
        wait_until(
            "the second replica stands by, ready",
            lambda: (
                probe(f"http://127.0.0.1:{second_port}/readyz")
                == (200, "ok: standby, ready to lead\n")
            ),
            timeout_seconds=120,
        )
        # The leader runs the Lease loop and both workers (the rollout's starts once the
        # claims and Modules are listed too); the standby only the Lease loop.
        wait_until(
            "the leader's three loops turn",
            lambda: (
                probe(f"http://127.0.0.1:{first_port}/healthz")
                == (200, "ok: turning: lease, reconcile-worker, rollout-worker\n")
            ),
            timeout_seconds=120,
        )
        assert probe(f"http://127.0.0.1:{second_port}/healthz") == (200, "ok: turning: lease\n")
