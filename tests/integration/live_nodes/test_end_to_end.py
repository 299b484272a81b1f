"""End to end: `gpuctl-coordinator` and several real `gpuctl-agent run` processes over TLS.

Each agent inspects its own fake host root with a token bound to a Pod on its Node. Every
node's GPUNode appears with its summary; a process opening a node's render device shows up in
that node's GPUNode (the agents rescan every second, as the coordinator's Welcome tells them),
and the other nodes' GPUNodes are not rewritten, since nothing changed there. The installed
`gpuctl` shows the same: `gpuctl nodes` through the API and straight from the coordinator,
and `gpuctl node inspect NODE --fresh` round-trips through the coordinator to the agent.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube
from testbed.agent_process import start_agent_process
from testbed.cluster_agents import AgentPods, agent_username, delete_gpunode, get_gpunode
from testbed.cluster_api import TEST_LABEL
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580, BACKPORT_TAG, kmm_out_of_tree
from testbed.harness.access import KubeCluster
from testbed.harness.ports import free_loopback_ports
from testbed.harness.serving_tls import ServingTls, serving_tls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
NODES = ("a", "b", "c")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def tls(tmp_path: Path) -> ServingTls:
    return serving_tls(tmp_path / "grpc-tls")


@pytest.fixture
def coordinator_port(
    kube_cluster: KubeCluster, namespace: str, tls: ServingTls, tmp_path: Path
) -> Iterator[int]:
    (port,) = free_loopback_ports(1)
    log = (tmp_path / "coordinator.log").open("wb")
    process = subprocess.Popen(
        [
            str(BIN / "gpuctl-coordinator"),
            f"--kubeconfig={kube_cluster.kubeconfig}",
            f"--namespace={namespace}",
            f"--gpudriver-selector={TEST_LABEL}={namespace}",
            "--identity=e2e",
            f"--grpc-port={port}",
            "--grpc-address=127.0.0.1",
            f"--tls-cert-file={tls.files.cert_file}",
            f"--tls-key-file={tls.files.key_file}",
            f"--agent-service-account={agent_username(namespace)}",
            "--heartbeat-interval=1",
            "--rescan-interval=1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield port
    finally:
        _stop(process)
        log.close()
        assert process.returncode == 0, (tmp_path / "coordinator.log").read_text()[-3000:]


def _agent(
    port: int, tls: ServingTls, root: Path, node: str, *, token_file: Path, log: Any
) -> subprocess.Popen[bytes]:
    return start_agent_process(
        port=port,
        ca_file=tls.files.cert_file.parent / "ca.crt",
        token_file=token_file,
        host_root=root,
        node=node,
        log=log,
    )


def _gpuctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gpuctl"), *args], capture_output=True, text=True, check=False, timeout=60
    )


def _rows(listing: str) -> dict[str, str]:
    return {line.split()[0]: line for line in listing.splitlines()[1:] if line.strip()}


def test_agents_on_fake_hosts_reach_gpunode_status(
    *,
    kube_cluster: KubeCluster,
    reader_token: str,
    namespace: str,
    make_node: Any,
    kube_admin: Any,
    tls: ServingTls,
    coordinator_port: int,
    tmp_path: Path,
) -> None:
    (tls.files.cert_file.parent / "ca.crt").write_bytes(tls.ca_pem)
    kube = Kube(kube_admin)
    pods = AgentPods(kube_cluster, namespace, kube_admin)
    hosts: dict[str, FakeHost] = {}
    agents: list[subprocess.Popen[bytes]] = []
    logs = contextlib.ExitStack()
    names = [make_node(n).metadata.name for n in NODES]
    try:
        for name in names:
            hosts[name] = kmm_out_of_tree(tmp_path / name / "root")
            token_file = tmp_path / name / "token"
            token_file.write_text(pods.token(name))
            log = logs.enter_context((tmp_path / name / "agent.log").open("wb"))
            agents.append(
                _agent(
                    coordinator_port, tls, hosts[name].root, name, token_file=token_file, log=log
                )
            )

        def summaries() -> dict[str, Any] | None:
            found = {n: ((get_gpunode(kube, n) or {}).get("status") or {}) for n in names}
            ready = all(
                s.get("session") == "Connected" and s.get("summary") for s in found.values()
            )
            return found if ready else None

        statuses = wait_until("every node's GPUNode", summaries, timeout_seconds=60)
        for name in names:
            assert statuses[name]["summary"]["module"] == BACKPORT_TAG
            assert statuses[name]["summary"]["gpus"] == 1
            assert statuses[name]["report"]["nodeName"] == name
        versions = {n: get_gpunode(kube, n)["metadata"]["resourceVersion"] for n in names}  # type: ignore[index]

        busy = names[1]
        hosts[busy].add_process(4242, "ollama")
        hosts[busy].add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
        hosts[busy].write("sys/module/xe/refcnt", "2\n")  # xe_compat's reference + the client

        def busy_reported() -> dict[str, Any] | None:
            status = (get_gpunode(kube, busy) or {}).get("status") or {}
            reasons = [b["reason"] for b in status.get("report", {}).get("blockers", [])]
            return status if "OPEN_CLIENTS" in reasons else None

        status = wait_until(
            "the open client reaches the GPUNode", busy_reported, timeout_seconds=30
        )
        clients = status["report"]["devices"][0]["clients"]
        assert [(c["pid"], c["command"]) for c in clients] == [(4242, "ollama")]
        for quiet in (names[0], names[2]):  # rescanned every second, unchanged: never written
            assert get_gpunode(kube, quiet)["metadata"]["resourceVersion"] == versions[quiet]  # type: ignore[index]

        kubeconfig = str(kube_cluster.kubeconfig)
        through_api = _gpuctl("nodes", "--kubeconfig", kubeconfig)
        assert through_api.returncode == 0, through_api.stderr
        rows = _rows(through_api.stdout)
        assert set(names) <= set(rows)
        assert "OPEN_CLIENTS" in rows[busy]
        assert all("OPEN_CLIENTS" not in rows[n] for n in names if n != busy)
        assert all(rows[n].endswith("connected") for n in names)
        reader = tmp_path / "reader-token"
        reader.write_text(reader_token)
        direct = _gpuctl(
            "nodes",
            f"--coordinator=localhost:{coordinator_port}",
            f"--ca-file={tls.files.cert_file.parent / 'ca.crt'}",
            f"--token-file={reader}",
        )
        assert direct.returncode == 0, direct.stderr
        assert set(_rows(direct.stdout)) == set(names)
        assert "OPEN_CLIENTS" in _rows(direct.stdout)[busy]

        hosts[busy].remove_process(4242)
        hosts[busy].write("sys/module/xe/refcnt", "1\n")
        fresh = _gpuctl("node", "inspect", busy, "--fresh", "--kubeconfig", kubeconfig)
        assert fresh.returncode == 0, fresh.stderr
        assert fresh.stdout.startswith("Agent connected, report received ")
        assert "pid 4242" not in fresh.stdout, "the process is gone from the fresh report"
        assert "xe is held by xe_compat" in fresh.stdout
    finally:
        for process in agents:
            _stop(process)
        logs.close()
        pods.delete_pods()
        for name in names:
            delete_gpunode(kube, name)
