"""`gpuctl version` against the real API server, as a user with only the chart's view role:
the coordinator's version from its Lease, the agents' counted from GPUNodes, and a warning for
the agents outside the supported skew."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.policies.rbac import COORDINATOR_LEASE, VIEW_RULES
from gpuctl.common import names
from gpuctl.common.build_version import gpuctl_version
from testbed.cluster_api import Api
from testbed.harness.access import KubeCluster
from testbed.harness.rbac_grants import granted, user

pytestmark = pytest.mark.integration

GPUCTL = str(Path(sys.executable).parent / "gpuctl")
GPUNODES = "/apis/gpuctl.dev/v1alpha1/gpunodes"


def gpuctl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GPUCTL, *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.fixture
def fleet(api: Api, namespace: str) -> Iterator[list[str]]:
    """The coordinator's Lease (as its leader writes it) and three GPUNodes: two agents at this
    gpuctl's version, one three minor releases ahead."""
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": names.DEFAULT_COORDINATOR_LEASE,
            "annotations": {names.COORDINATOR_VERSION: gpuctl_version()},
        },
        "spec": {"holderIdentity": "gpuctl-coordinator-7d9f-abcde", "leaseDurationSeconds": 15},
    }
    api.kube.request(
        "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body=lease
    )
    nodes = {f"{namespace}-a": gpuctl_version(), f"{namespace}-b": gpuctl_version()}
    nodes[f"{namespace}-c"] = "0.4.0"
    for node, version in nodes.items():
        body = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GPUNode", "metadata": {"name": node}}
        api.kube.request("POST", GPUNODES, body=body)
        api.kube.request(
            "PATCH",
            f"{GPUNODES}/{node}/status",
            body={"status": {"agentVersion": version}},
            content_type="application/merge-patch+json",
        )
    yield list(nodes)
    for node in nodes:
        api.kube.request("DELETE", f"{GPUNODES}/{node}")


@pytest.fixture
def viewer(api: Api, kube_cluster: KubeCluster, namespace: str) -> Iterator[Path]:
    """A user bound to the chart's view rules (the Lease's name as the chart names it)."""
    rules: list[dict[str, Any]] = json.loads(
        json.dumps(VIEW_RULES).replace(COORDINATOR_LEASE, names.DEFAULT_COORDINATOR_LEASE)
    )
    viewer = f"{namespace}-viewer"
    with granted(api.kube, f"{namespace}-gpuctl-view", rules, user(viewer)):
        yield kube_cluster.user_kubeconfig(viewer)


def test_a_viewer_sees_every_version_and_the_unsupported_skew(
    fleet: list[str], viewer: Path, namespace: str
) -> None:
    shown = gpuctl(viewer, "version", "--namespace", namespace, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    ours = gpuctl_version()
    assert document["client"] == ours
    assert document["coordinator"] == {
        "version": ours,
        "holder": "gpuctl-coordinator-7d9f-abcde",
        "lease": f"{namespace}/{names.DEFAULT_COORDINATOR_LEASE}",
    }
    # GPUNodes are cluster-wide: other tests' may be there too; ours are counted.
    assert document["agents"][ours] >= 2
    assert document["agents"]["0.4.0"] == 1
    assert any(
        w.startswith("1 node(s) run agent 0.4.0, more than 1 minor") for w in document["warnings"]
    )
    text = gpuctl(viewer, "version", "--namespace", namespace)
    assert f"Coordinator:  {ours} (Lease {namespace}/gpuctl-coordinator, leader " in text.stdout
    assert "warning: 1 node(s) run agent 0.4.0" in text.stdout


def test_no_lease_is_an_unknown_coordinator_and_no_access_is_an_error(
    fleet: list[str], viewer: Path, kube_cluster: KubeCluster, namespace: str
) -> None:
    elsewhere = gpuctl(viewer, "version", "--namespace", f"{namespace}-none", "-o", "json")
    assert elsewhere.returncode == 0, elsewhere.stderr
    document = json.loads(elsewhere.stdout)
    assert document["coordinator"]["version"] is None
    assert document["warnings"][0] == "the coordinator's version is unknown: skew not checked"
    stranger = kube_cluster.user_kubeconfig(f"{namespace}-stranger")
    refused = gpuctl(stranger, "version", "--namespace", namespace)
    assert refused.returncode == 1
    assert f"lease {namespace}/gpuctl-coordinator" in refused.stderr


def _lease(api: Api, namespace: str, name: str, holder: str) -> None:
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "annotations": {names.COORDINATOR_VERSION: gpuctl_version()}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }
    api.kube.request(
        "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body=body
    )


def test_a_release_of_another_name_is_found_and_two_are_named(
    api: Api, kube_cluster: KubeCluster, namespace: str
) -> None:
    """A release named `prod`: its Lease `prod-gpuctl-coordinator`, found without --lease by
    `version` and `support-bundle` (the one Lease a coordinator annotated); a second release in
    the namespace makes the choice the admin's, said with both names."""
    admin = kube_cluster.kubeconfig
    _lease(api, namespace, "prod-gpuctl-coordinator", "prod-gpuctl-coordinator-5c8d-xyz12")
    # A Lease of something else in the namespace is not taken for gpuctl's.
    other = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}}
    api.kube.request(
        "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body=other
    )
    shown = gpuctl(admin, "version", "--namespace", namespace, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["coordinator"] == {
        "version": gpuctl_version(),
        "holder": "prod-gpuctl-coordinator-5c8d-xyz12",
        "lease": f"{namespace}/prod-gpuctl-coordinator",
    }
    bundled = gpuctl(admin, "support-bundle", "--namespace", namespace, "-f", "/dev/null")
    assert bundled.returncode == 0, bundled.stderr

    _lease(api, namespace, "staging-gpuctl-coordinator", "staging-gpuctl-coordinator-1-a")
    two = gpuctl(admin, "version", "--namespace", namespace)
    assert two.returncode == 1
    assert (
        f"several gpuctl coordinators' Leases in namespace {namespace}: prod-gpuctl-coordinator, "
        "staging-gpuctl-coordinator; name one with --lease"
    ) in two.stderr
    named = gpuctl(
        admin, "version", "--namespace", namespace, "--lease", "staging-gpuctl-coordinator"
    )
    assert named.returncode == 0, named.stderr
    assert f"(Lease {namespace}/staging-gpuctl-coordinator, leader staging-" in named.stdout
