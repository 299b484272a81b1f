"""Fixtures for the chaos tests: a control plane of their own, which they may break.

- ``own_plane`` (per module): a ``ControlPlane`` (``pause``/``resume``/``restart`` of
  etcd, kube-apiserver, kube-controller-manager) and its ``KubeCluster``, started like the
  shared ``kube_cluster`` but not shared, so stopping its etcd or API server disturbs no other
  test. Stopped and removed after the module.
- ``own_namespace`` (per test): a fresh namespace in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane
from testbed.harness.waiting import wait_until
from tests.support.own_cluster import own_cluster


@pytest.fixture(scope="module")
def own_plane() -> Iterator[tuple[ControlPlane, KubeCluster]]:
    with own_cluster("gpuctl-chaos-cluster-") as plane:
        yield plane


@pytest.fixture
def own_namespace(own_plane: tuple[ControlPlane, KubeCluster]) -> Iterator[str]:
    _, cluster = own_plane
    with cluster.admin_client() as admin:
        core: Any = k8s.CoreV1Api(admin)
        name: str = core.create_namespace({"metadata": {"generateName": "chaos-"}}).metadata.name

        def default_service_account_exists() -> bool:
            accounts = core.list_namespaced_service_account(name).items
            return any(account.metadata.name == "default" for account in accounts)

        wait_until(
            f"namespace {name} has its default ServiceAccount", default_service_account_exists
        )
        yield name
        core.delete_namespace(name)
