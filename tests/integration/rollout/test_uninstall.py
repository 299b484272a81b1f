"""Uninstalling gpuctl in the documented order (docs/uninstall.md) with a busy node, end to end.

The coordinator runs as the chart runs it (its ServiceAccount, the chart's RBAC) with the
chart's Module delete guard installed. Deleting the GPUDriver first: the idle nodes are
unloaded one by one, the busy node never is and status names it with why; a cluster admin
who tries to hurry things by deleting the Module is refused; once the node is idle, the
coordinator unloads it, deletes the Module through the guard and releases the GPUDriver, and
only then is the chart removed.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.kube.client import Kube
from coordinator.policies.module_guard import refusal_message
from gpuctl.common import names
from gpuctl.gpudriver.status import unloading
from testbed.coordinator_rbac import bound_coordinator, token_kubeconfig, username
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from testbed.rollout_live.rig import DRIVER, RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    assert_left,
    busy_with_ollama,
    idle_again,
    start,
    wait_status,
)
from tests.support.module_guard import installed_guard, refused_delete

pytestmark = pytest.mark.integration

MODULE = f"{DRIVER}-gpu"


def ready_condition(rig: RolloutRig) -> dict[str, Any]:
    conditions = (rig.driver().get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def test_uninstall_in_order_unloads_the_idle_nodes_and_never_the_busy_one(
    rollout_rig: RolloutRig, kube_cluster: KubeCluster
) -> None:
    rig = rollout_rig
    namespace = rig.namespace
    with (
        bound_coordinator(rig.kube, namespace) as account,
        kube_cluster.user_client("alice", ("system:masters",)) as alice_client,
    ):
        token = kube_cluster.service_account_token(namespace, account)
        rig.coordinator_kubeconfig = token_kubeconfig(
            rig.folder / "sa.kubeconfig", kube_cluster.server, kube_cluster.ca_cert, token
        )
        idle, busy, other = start(rig, ["a", "b", "c"], FAST)
        alice = Kube(alice_client)
        with installed_guard(
            rig.kube, namespace, username(namespace), probe=alice, probe_module=MODULE
        ):
            busy_with_ollama(rig, busy)
            # 1. Delete the GPUDrivers: their nodes are unloaded one by one.
            rig.delete_driver()
            rig.wait_phases(
                {idle: "", other: "", busy: "Blocked"}, timeout=90, version=names.REMOVAL_VERSION
            )
            wait_status(
                rig,
                f"names {busy} with pid 4242 (ollama)",
                lambda s: any(
                    row.get("name") == busy and "pid 4242 (ollama)" in str(row.get("reason"))
                    for row in s.get("nodes") or []
                ),
            )
            wait_until(
                "the Ready condition says one node is left",
                lambda: ready_condition(rig).get("message") == unloading([busy]),
            )
            assert rig.driver()["status"]["kmmStatus"] == "Removing"
            assert_left(rig, idle)
            assert_left(rig, other)
            assert rig.hosts[busy].real("sys/module/xe").exists()
            assert busy not in rig.kernels.unloads
            # Hurrying it by deleting the Module is refused: KMM would unload the busy node.
            refused = refused_delete(alice, namespace, MODULE)
            assert refused is not None
            assert refusal_message(MODULE, DRIVER) in refused.message
            assert rig.kmm.unloads_while_busy() == []
            # 2. The node goes idle: the coordinator unloads it, deletes the Module (the
            # guard lets its ServiceAccount through) and releases the GPUDriver.
            idle_again(rig, busy)
            wait_until("the GPUDriver gone", rig.driver_gone, timeout_seconds=90)
            assert_left(rig, busy)
            with pytest.raises(Exception, match="404"):
                rig.kube.request(
                    "GET",
                    f"/apis/{names.KMM_GROUP}/{names.KMM_VERSION}/namespaces/{namespace}/"
                    f"{names.KMM_MODULE_PLURAL}/{MODULE}",
                )
        # 3. helm uninstall (the coordinator goes), 4. the CRDs: nothing of gpuctl is left
        # that only the coordinator could delete.
        assert rig.kernels.violations == []
        assert rig.kmm.unloads_while_busy() == []
