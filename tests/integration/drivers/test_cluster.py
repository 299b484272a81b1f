"""Cluster-level behaviour against the real API server: KMM detection, conflicts between
GPUDrivers, leader election between two coordinators, and how fast changes are acted on.

KMM's CRD stays installed (the cluster is shared by the whole session); a coordinator that
sees no KMM gets a discovery function answering what the real /apis answers minus the
kmm.sigs.x-k8s.io group, and that answer can be switched back without restarting it.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime

import pytest

from gpuctl.common.timestamps import format_microseconds
from testbed.cluster_api import (
    Api,
    SwitchableKmm,
    gpudriver,
    node_labels,
    simple_spec,
    wait_status,
)
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator
from tests.support.gpu_nodes import GpuNodes

pytestmark = pytest.mark.integration

KMM_NOT_INSTALLED = "KMM is not installed in the cluster."


def test_kmm_absent_then_installed_without_restart(
    kube_cluster: KubeCluster,
    namespace: str,
    api: Api,
    gpu_nodes: GpuNodes,
) -> None:
    name, module = f"{namespace}-kmm", f"{namespace}-kmm-gpu"
    gpu_nodes.add("n1", node_labels(namespace))
    discovery = SwitchableKmm(api.kube)
    created = api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    with running_coordinator(kube_cluster, namespace, discover=discovery):
        status = wait_status(
            api, name, lambda s: KMM_NOT_INSTALLED in s.get("errors", []), "reports no KMM"
        )
        assert status["errors"] == [KMM_NOT_INSTALLED]
        assert status["kmmStatus"] == "N/A"
        assert api.get_module(namespace, module) is None
        assert "KMMNotInstalled" in api.event_reasons(created["metadata"]["uid"])
        discovery.hidden.clear()  # "KMM installed"
        wait_until("module", lambda: api.get_module(namespace, module))
        api.load_as_the_rollout_would(f"{namespace}-n1", name, namespace)
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "1/1", "reports 1/1")
        assert status["errors"] == []


def test_without_kernel_module_kmm_absence_is_no_error(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-nokm"
    discovery = SwitchableKmm(api.kube)
    api.create_driver(gpudriver(name, namespace, {"nodeSelector": {"a": "b"}}))
    with running_coordinator(kube_cluster, namespace, discover=discovery):
        status = wait_status(api, name, lambda s: s.get("kmmStatus") == "N/A", "reports N/A")
        assert status["errors"] == []


def test_second_gpudriver_with_overlapping_selector_reports_conflict(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    first, second, third = f"{namespace}-a", f"{namespace}-b", f"{namespace}-c"
    api.create_driver(gpudriver(first, namespace, {**simple_spec(namespace)}))
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    overlapping = simple_spec(namespace)
    overlapping["nodeSelector"]["pool"] = "blue"
    api.create_driver(gpudriver(second, namespace, overlapping))
    disjoint = simple_spec(namespace)
    disjoint["nodeSelector"] = {"gpuctl.test/ns": "elsewhere"}
    api.create_driver(gpudriver(third, namespace, disjoint))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(api, second, lambda s: bool(s.get("errors")), "reports a conflict")
        assert status["errors"][0].startswith(f"GPUDriver {first} already loads the driver")
        assert api.get_module(namespace, f"{second}-gpu") is None
        wait_until("first module", lambda: api.get_module(namespace, f"{first}-gpu"))
        wait_until("third module", lambda: api.get_module(namespace, f"{third}-gpu"))
        # Once the first GPUDriver is gone, the second one gets its Module.
        api.delete_driver(first)
        wait_until("second module", lambda: api.get_module(namespace, f"{second}-gpu"))
        status = wait_status(api, second, lambda s: not s.get("errors"), "has no errors")


def test_two_coordinators_only_the_leader_acts_and_the_standby_takes_over(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    first, second = f"{namespace}-l1", f"{namespace}-l2"
    api.create_driver(gpudriver(first, namespace, simple_spec(namespace)))
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gpuctl-coordinator"
    with contextlib.ExitStack() as standby:
        with running_coordinator(kube_cluster, namespace, identity="a") as a:
            wait_until("a leads", a.elector.leading.is_set)
            wait_until("first module", lambda: api.get_module(namespace, f"{first}-gpu"))
            b = standby.enter_context(running_coordinator(kube_cluster, namespace, identity="b"))
            time.sleep(1.5)
            assert not b.elector.leading.is_set()
            assert b.reconciles == 0
            assert a.reconciles > 0
            assert api.kube.request("GET", lease_path)["spec"]["holderIdentity"] == "a"
        stopped = time.monotonic()  # a released the Lease on its way out
        wait_until("b leads", b.elector.leading.is_set, timeout_seconds=10)
        takeover = time.monotonic() - stopped
        assert api.kube.request("GET", lease_path)["spec"]["holderIdentity"] == "b"
        other_nodes = {**simple_spec(namespace), "nodeSelector": {"gpuctl.test/ns": "other"}}
        api.create_driver(gpudriver(second, namespace, other_nodes))
        wait_until("second module", lambda: api.get_module(namespace, f"{second}-gpu"))
    print(f"\nstandby took over {takeover:.3f}s after the leader stopped")
    assert takeover < 3.0


def test_reacts_within_a_second(kube_cluster: KubeCluster, namespace: str, api: Api) -> None:
    name = f"{namespace}-fast"
    with running_coordinator(kube_cluster, namespace) as coordinator:
        wait_until("leading", coordinator.elector.leading.is_set)
        time.sleep(0.5)  # caches synced
        started = time.monotonic()
        api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
        wait_until(
            "module", lambda: api.get_module(namespace, f"{name}-gpu"), interval_seconds=0.01
        )
        created_after = time.monotonic() - started
        started = time.monotonic()
        api.patch_driver(name, {"spec": {"kernelModule": None}})
        wait_until(
            "module deleted",
            lambda: api.get_module(namespace, f"{name}-gpu") is None,
            interval_seconds=0.01,
        )
        deleted_after = time.monotonic() - started
    print(f"\nModule created {created_after:.3f}s, deleted {deleted_after:.3f}s after the change")
    assert created_after < 1.0
    assert deleted_after < 1.0


def test_takes_over_a_crashed_leaders_lease_only_after_it_expires(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-crash"
    api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    renewed = datetime.now(UTC)
    api.kube.request(
        "POST",
        leases,
        body={
            "metadata": {"name": "gpuctl-coordinator"},
            "spec": {
                "holderIdentity": "crashed-replica",
                "leaseDurationSeconds": 3,
                "acquireTime": format_microseconds(renewed),
                "renewTime": format_microseconds(renewed),
            },
        },
    )
    with running_coordinator(kube_cluster, namespace) as coordinator:
        time.sleep(1.5)
        assert not coordinator.elector.leading.is_set()
        assert api.get_module(namespace, f"{name}-gpu") is None
        wait_until("takes over", coordinator.elector.leading.is_set, timeout_seconds=10)
        took_over_after = (datetime.now(UTC) - renewed).total_seconds()
        assert took_over_after >= 3.0
        lease = api.kube.request("GET", f"{leases}/gpuctl-coordinator")
        assert lease["spec"]["holderIdentity"] == "coordinator-a"
        assert lease["spec"]["leaseTransitions"] == 1
        wait_until("module", lambda: api.get_module(namespace, f"{name}-gpu"))
