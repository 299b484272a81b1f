"""A frozen agent's GPUNode turns stale as soon as the coordinator's freshness bound passes.

Real API server, the coordinator's live-node server over TLS gRPC, and a real `gpuctl-agent
run` process on a fake host root. The agent is frozen with SIGSTOP: its stream stays open
(the session still says Connected) but no heartbeat comes. Within the bound (plus a small
margin) the GPUNode says Fresh=False, NoHeartbeat, with its blockers unknown, in one write;
`gpuctl nodes` and the API server's own table (what `kubectl get gpunodes` prints) say so.
After SIGCONT the heartbeats resume and it is fresh again.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from testbed.agent_process import start_agent_process
from testbed.cluster_agents import AgentPods, delete_gpunode, get_gpunode
from testbed.fakehost.scenarios import kmm_out_of_tree
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
FRESHNESS = 3.0  # the `live` fixture's bound
HEARTBEAT = 1.0  # and the agents' heartbeat interval
MARGIN = 2.0  # the timer wakes just after the bound; the write and our polling take the rest
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@contextlib.contextmanager
def _agent(live: LiveNodes, tls: ServingTls, node: str, token: str, folder: Path) -> Iterator[Any]:
    host = kmm_out_of_tree(folder / "root")
    (folder / "ca.crt").write_bytes(tls.ca_pem)
    (folder / "token").write_text(token)
    with (folder / "agent.log").open("wb") as log:
        process = start_agent_process(
            port=live.port,
            ca_file=folder / "ca.crt",
            token_file=folder / "token",
            host_root=host.root,
            node=node,
            log=log,
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _status(kube: Kube, node: str) -> dict[str, Any]:
    return dict((get_gpunode(kube, node) or {}).get("status") or {})


def _fresh(status: dict[str, Any]) -> dict[str, Any]:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Fresh":
            return dict(condition)
    return {}


def _printed(kube_admin: Any, node: str) -> dict[str, str]:
    """The row the API server renders from the printer columns, as `kubectl get` shows it."""
    method, url, headers, _, _ = kube_admin.param_serialize(
        "GET",
        f"/apis/gpuctl.dev/v1alpha1/gpunodes/{node}",
        header_params={"Accept": TABLE},
        auth_settings=["BearerToken"],
    )
    response = kube_admin.call_api(method, url, header_params=headers)
    response.read()
    table = json.loads(response.data)
    columns = [c["name"] for c in table["columnDefinitions"]]
    (row,) = table["rows"]
    return {name: str(cell) for name, cell in zip(columns, row["cells"], strict=True)}


def _gpuctl_nodes_row(cluster: KubeCluster, node: str) -> str:
    listing = subprocess.run(
        [str(BIN / "gpuctl"), "nodes", "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    (row,) = [line for line in listing.splitlines() if line.split()[:1] == [node]]
    return row


def test_a_frozen_agent_turns_its_gpunode_stale_within_the_bound_and_back(
    *,
    kube_cluster: KubeCluster,
    kube_admin: Any,
    make_node: Any,
    agents: AgentPods,
    live: LiveNodes,
    tls: ServingTls,
    tmp_path: Path,
) -> None:
    assert live.freshness_seconds == FRESHNESS
    kube = Kube(kube_admin)
    node = make_node("frozen").metadata.name
    try:
        with _agent(live, tls, node, agents.token(node), tmp_path) as agent:
            status = wait_until(
                "the agent's report is on its GPUNode, fresh",
                lambda: (
                    (s := _status(kube, node)).get("report")
                    and _fresh(s).get("status") == "True"
                    and s
                ),
                timeout_seconds=60,
            )
            assert status["session"] == "Connected"
            assert status["unloadBlockers"] == str(status["summary"]["blockers"])
            assert _printed(kube_admin, node)["Fresh"] == "True"
            writes = live.mirror.writes

            agent.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            status = wait_until(
                "the GPUNode says the report is stale",
                lambda: (s := _status(kube, node)) and _fresh(s).get("status") == "False" and s,
                timeout_seconds=FRESHNESS + 30,
                interval_seconds=0.02,
            )
            after = time.monotonic() - frozen_at
            # Its last heartbeat came at most one interval before the freeze.
            assert FRESHNESS - HEARTBEAT - 0.2 < after <= FRESHNESS + MARGIN, after
            fresh = _fresh(status)
            assert fresh["reason"] == "NoHeartbeat"
            assert "no heartbeat or report from the agent for" in fresh["message"]
            assert "(the freshness bound is 3s)" in fresh["message"]
            assert status["session"] == "Connected"  # the stream is still open
            assert status["unloadBlockers"] == "unknown"
            printed = _printed(kube_admin, node)
            assert (printed["Blockers"], printed["Session"], printed["Fresh"]) == (
                "unknown",
                "Connected",
                "False",
            )
            row = _gpuctl_nodes_row(kube_cluster, node)
            assert row.split()[-2:] == ["connected,", "stale"], row
            assert " unknown " in row, row
            assert live.mirror.writes == writes + 1  # going stale is one write

            agent.send_signal(signal.SIGCONT)
            status = wait_until(
                "the GPUNode is fresh again",
                lambda: (s := _status(kube, node)) and _fresh(s).get("status") == "True" and s,
                timeout_seconds=30,
            )
            assert _fresh(status)["reason"] == "AgentHeard"
            assert status["unloadBlockers"] == str(status["summary"]["blockers"])
            row = _gpuctl_nodes_row(kube_cluster, node)
            assert row.split()[-1] == "connected", row
            assert "stale" not in row, row
            assert " unknown " not in row, row
    finally:
        delete_gpunode(kube, node)
