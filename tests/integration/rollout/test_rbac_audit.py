"""The chart's RBAC is exactly what the coordinator calls: the API server's audit log decides.

The coordinator runs as a process under ServiceAccount `coordinator` bound to
coordinator/policies/rbac.py's rules as the chart binds them, through a whole life: it leads, labels
its Pod for the gRPC Service, reconciles a GPUDriver into a Module, mirrors two agents into
GPUNodes, reviews their tokens and a NodeService caller's access, rolls a new version node by node,
evicts a GPU pod, holds KMM's worker off a node opened after its check and lets it go, files Events
(one repeated), and deletes the Module when the GPUDriver goes. The audit log (every
ServiceAccount request, testbed/harness/flags.py) then must show no request refused, no request
the rules do not allow, and every granted verb used.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator.kube.client import path
from gpuctl.api.v1alpha1 import node_service_pb2 as node_pb
from gpuctl.api.v1alpha1 import node_service_pb2_grpc as node_grpc
from testbed.coordinator_rbac import (
    Call,
    Grant,
    audited_calls,
    bound_coordinator,
    declared_grants,
    grant_of,
    token_kubeconfig,
    username,
)
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig, stop_process
from testbed.rollout_live.scenario import (
    FAST,
    busy_with_ollama,
    gpu_pod,
    idle_again,
    start,
    wait_status,
)
from testbed.rollout_live.worker_hold_guard import installed_worker_hold_guard

pytestmark = pytest.mark.integration

EVENTS_NAMESPACE = "default"
SERVING_POD = "coordinator-0"


def complete_at(target: str) -> Callable[[dict[str, Any]], bool]:
    def check(status: dict[str, Any]) -> bool:
        return (status.get("state"), status.get("targetVersion")) == ("Complete", target)

    return check


def list_nodes_as(rig: RolloutRig, token: str) -> None:
    """A NodeService call: the coordinator reviews the token and the caller's access."""
    credentials = grpc.ssl_channel_credentials(root_certificates=rig.tls.ca_pem)
    with (
        grpc.secure_channel(f"localhost:{rig.port}", credentials) as channel,
        pytest.raises(grpc.RpcError) as raised,
    ):
        node_grpc.NodeServiceStub(channel).ListNodes(
            node_pb.ListNodesRequest(),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=30,
        )
    error: Any = raised.value
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED  # the default account may not


@pytest.mark.own_kmm
def test_the_charts_rbac_is_exactly_what_the_coordinator_calls(
    rollout_rig: RolloutRig, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    rig = rollout_rig
    audit_log = kube_cluster.layout.audit_log
    user = username(namespace)

    def called(verb: str, resource: str) -> bool:
        return any((c.verb, c.resource) == (verb, resource) for c in audited_calls(audit_log, user))

    rig.kube.request(
        "POST",
        path("", "v1", "pods", namespace=namespace),
        body={
            "metadata": {"name": SERVING_POD},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/gpuctl"}]},
        },
    )
    with bound_coordinator(rig.kube, namespace, EVENTS_NAMESPACE) as account:
        token = kube_cluster.service_account_token(namespace, account)
        rig.coordinator_kubeconfig = token_kubeconfig(
            tmp_path / "coordinator.kubeconfig", kube_cluster.server, kube_cluster.ca_cert, token
        )
        rig.coordinator_env = {"POD_NAME": SERVING_POD}
        rollout = {**FAST, "evictGPUPods": True, "timeouts": {**FAST["timeouts"], "drain": "5s"}}
        idle, busy = start(rig, ["a", "b"], rollout)
        pod = gpu_pod(rig, busy)
        rig.set_version(NEW)
        wait_until(
            "the GPU pod evicted", lambda: called("create", "pods/eviction"), timeout_seconds=120
        )
        # No kubelet finishes the eviction: take the pod away as its kubelet would.
        rig.kube.request(
            "DELETE",
            path("", "v1", "pods", namespace=namespace, name=pod),
            body={"gracePeriodSeconds": 0},
        )
        rig.wait_phases({idle: "Done", busy: "Done"}, timeout=120)
        # A daemon opens a device after the check, before KMM's worker runs: KMM's worker is
        # held off the node (the namespace's hold annotation, KMM's Pod deleted), then let go
        # and KMM nudged once the node is checked idle again.
        with installed_worker_hold_guard(rig.kube, namespace):
            rig.kmm.hold_node(idle)
            rig.set_version(OLD)
            wait_until(
                "KMM's unloader made", lambda: rig.worker_pods("Unload", idle), timeout_seconds=60
            )
            busy_with_ollama(rig, idle)
            rig.wait_phases({idle: "Blocked"}, timeout=60)
            wait_until("the unloader deleted", lambda: called("delete", "pods"), timeout_seconds=60)
            # KMM stopped while the hold is let go: it makes no worker, so the coordinator
            # nudges it (a patch of its NodeModulesConfig) whatever KMM's own retry timing.
            rig.kmm.operator.stop()
            rig.kmm.hold_node(idle, held=False)
            idle_again(rig, idle)
            wait_until(
                "KMM nudged", lambda: called("patch", "nodemodulesconfigs"), timeout_seconds=60
            )
            rig.kmm.operator.start()
            rig.wait_phases({idle: "Done", busy: "Done"}, timeout=120)
        rig.set_version(NEW)
        rig.wait_phases({idle: "Done", busy: "Done"}, timeout=120)
        # Back to OLD and forward to NEW again: the second "all nodes run NEW" is a repeated
        # Event (count 2, a patch).
        for version in (OLD, NEW):
            rig.set_version(version)
            target = rig.target()
            rig.wait_phases({idle: "Done", busy: "Done"}, timeout=120)
            wait_status(rig, f"says Complete at {target}", complete_at(target))
        wait_until("an Event repeated", lambda: called("patch", "events"), timeout_seconds=60)
        list_nodes_as(rig, kube_cluster.service_account_token(namespace, "default"))
        rig.delete_driver()
        wait_until("the GPUDriver gone", rig.driver_gone, timeout_seconds=120)
        assert rig.coordinator is not None
        stop_process(rig.coordinator)

    calls = audited_calls(audit_log, user)
    refused = sorted({c for c in calls if c.code == 403}, key=str)
    assert refused == []
    ungranted: list[Call] = sorted(
        {c for c in calls if not grant_of(c, namespace, EVENTS_NAMESPACE)}, key=str
    )
    assert ungranted == []
    used: set[Grant] = set()
    for call in calls:
        used |= grant_of(call, namespace, EVENTS_NAMESPACE)
    unused = sorted(declared_grants() - used, key=str)
    assert unused == []
