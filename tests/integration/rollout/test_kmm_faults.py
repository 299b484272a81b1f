"""KMM itself misbehaving under a rollout: its manager SIGKILLed while a worker is loading or
unloading, a worker Pod deleted mid-run, its webhook down while gpuctl updates the Module.

Real KMM (tests/harness/real_kmm.py) under the real coordinator and agents. Each test ends, as
every rollout test does (RolloutRig.close), asserting that no unload was attempted on a busy
node; each shows every node ending Done and verified at the target, or held with a reason
that names what KMM did.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harness.waiting import wait_until
from tests.support.rollout_live.rig import NEW, OLD, RolloutRig
from tests.support.rollout_live.scenario import (
    FAST,
    busy_with_ollama,
    idle_again,
    module_version,
    start,
    wait_status,
)

pytestmark = pytest.mark.integration

WORKER_ACTION = "kmm.node.kubernetes.io/worker-action"
SLOW_KMM_SECONDS = 2.0  # every worker container starts this late: a window to break KMM in


def worker_pods(rig: RolloutRig, action: str) -> list[dict[str, Any]]:
    """KMM's worker Pods of `action` ("Load", "Unload") that exist now."""
    answer = rig.kube.request(
        "GET",
        f"/api/v1/namespaces/{rig.namespace}/pods",
        query={"labelSelector": f"{WORKER_ACTION}={action}"},
    )
    return list(answer.get("items") or [])


def slow_start(rig: RolloutRig, shorts: list[str]) -> list[str]:
    """`start`, then every node's KMM worker starts SLOW_KMM_SECONDS after its creation."""
    nodes = start(rig, shorts, FAST)
    for node in nodes:
        rig.kmm.delay_node(node, SLOW_KMM_SECONDS)
    return nodes


def assert_all_at_new(rig: RolloutRig, nodes: list[str]) -> None:
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=180)
    rig.wait_kmm_loaded(nodes)
    assert [module_version(rig, node) for node in nodes] == [NEW] * len(nodes)
    assert rig.kernels.violations == []


@pytest.mark.parametrize("action", ["Unload", "Load"])
def test_kmm_killed_while_its_worker_runs_strands_no_node(
    rollout_rig: RolloutRig, action: str
) -> None:
    rig = rollout_rig
    nodes = slow_start(rig, ["a", "b", "c"])
    busy_with_ollama(rig, nodes[2])
    rig.set_version(NEW)
    wait_until(f"a {action} worker Pod", lambda: worker_pods(rig, action), timeout_seconds=90)
    rig.kmm.operator.kill()  # SIGKILL: KMM stops mid-reconcile; its worker Pod runs on
    rig.kmm.operator.start()
    rig.wait_phases({nodes[0]: "Done", nodes[1]: "Done", nodes[2]: "Blocked"}, timeout=180)
    assert module_version(rig, nodes[2]) != NEW
    idle_again(rig, nodes[2])
    assert_all_at_new(rig, nodes)
    assert rig.kmm.operator.starts == 2


def test_a_worker_pod_deleted_mid_run_is_made_again_and_the_node_finishes(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = slow_start(rig, ["a", "b"])
    rig.set_version(NEW)
    [pod] = wait_until("a worker Pod", lambda: worker_pods(rig, "Unload"), timeout_seconds=90)
    name = pod["metadata"]["name"]
    rig.kube.request("DELETE", f"/api/v1/namespaces/{rig.namespace}/pods/{name}")
    assert_all_at_new(rig, nodes)


def test_kmms_webhook_down_holds_the_module_update_and_the_rollout_waits(
    rollout_rig: RolloutRig,
) -> None:
    """KMM's webhook (failurePolicy Fail) refuses every Module write while it is down: the
    coordinator cannot move the Module to the new version, so no node starts; once it is back,
    the rollout goes."""
    rig = rollout_rig
    nodes = start(rig, ["a", "b"], FAST)
    rig.kmm.webhook.kill()
    rig.set_version(NEW)
    target = rig.target()
    status = wait_status(
        rig,
        f"waits for the Module to ask for {target}",
        lambda s: s.get("targetVersion") == target and "waiting for Module" in s.get("message", ""),
        timeout=90,
    )
    assert status["counts"]["Loading"] == 0, json.dumps(status)
    assert [module_version(rig, node) for node in nodes] == [OLD, OLD]
    rig.kmm.webhook.start()
    assert_all_at_new(rig, nodes)
