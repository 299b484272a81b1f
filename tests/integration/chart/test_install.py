"""The chart installed with real `helm install` into the test API server: every object is
accepted and none holds a key, and the coordinator runs under exactly the chart's RBAC (its
ServiceAccount's token) and the chart's flags (the Deployment's args), making its own TLS
Secret and CA ConfigMap."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube, KubeError, path
from gpuctl.common.names import SERVING_LABEL
from gpuctl.gpudriver.module_spec import module_name
from testbed.cluster_api import TEST_LABEL, Api, gpudriver, simple_spec
from testbed.harness.access import KubeCluster
from testbed.harness.ports import free_loopback_ports
from testbed.harness.waiting import wait_until
from tests.support.chart_release import Release, chart_release, token_kubeconfig

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    grpc_port, metrics_port = free_loopback_ports(2)
    values = {
        "coordinator": {
            # Manage only this test's GPUDrivers; ports free on this machine, so the
            # coordinator can run with the rendered flags as they are.
            "gpudriverSelector": f"{TEST_LABEL}={namespace}",
            "grpc": {"port": grpc_port},
            "metricsPort": metrics_port,
        },
        # Every optional rule of the policy, so the API server checks each one's shape.
        "networkPolicy": {
            "enabled": True,
            "grpcFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
            "metricsFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
            ],
            "prometheus": {"to": [{"ipBlock": {"cidr": "10.96.0.0/12"}}]},
            "extraEgress": [{"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]}],
        },
    }
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, values) as installed:
        yield installed


def test_every_object_is_accepted_and_none_holds_a_key(release: Release) -> None:
    notes = release.install()
    assert f"DaemonSet {release.fullname}-agent" in notes
    # The default images are fully qualified (localhost/...), and the notes say what that means.
    assert "image localhost/gpuctl-coordinator:" in notes
    assert "Images: localhost/... are the names hack/images/build gives its images" in notes
    manifest = release.manifest()
    assert {o["kind"] for o in manifest} >= {
        "Deployment", "DaemonSet", "ClusterRole", "NetworkPolicy"
    }  # fmt: skip
    # selfSigned: no key in the release; the coordinator makes its Secret (the next test).
    assert "Secret" not in {o["kind"] for o in manifest}
    assert "PRIVATE KEY" not in json.dumps(manifest)
    for obj in manifest:
        assert release.get(obj) is not None, f"{obj['kind']} {obj['metadata']['name']} missing"

    release.upgrade("--set", "coordinator.logLevel=debug")

    args = release.deployment()["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=debug" in args  # the upgrade did apply


def pod_env(container: dict[str, Any], pod: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet would give it (values and downward-API fields)."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        field = entry["valueFrom"]["fieldRef"]["fieldPath"]
        known = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"]["namespace"],
        }
        assert field in known, f"the test cannot play the downward API field {field}"
        env[entry["name"]] = known[field]
    return env


def test_the_coordinator_runs_under_the_charts_rbac_and_flags(
    kube_cluster: KubeCluster, release: Release, api: Api, namespace: str, tmp_path: Path
) -> None:
    release.install()
    deployment = release.deployment()
    # The test cluster runs no ReplicaSet controller (testbed/harness/flags.py): the test makes
    # the Pod it would, from the Deployment's template, and the coordinator plays it.
    template = deployment["spec"]["template"]
    pod = api.kube.request(
        "POST",
        path("", "v1", "pods", namespace=namespace),
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "name": f"{release.fullname}-coordinator-0"},
            "spec": template["spec"],
        },
    )
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    account = spec["serviceAccountName"]
    assert account == f"{release.fullname}-coordinator"
    token = kube_cluster.service_account_token(
        namespace, account, bound_pod=pod["metadata"]["name"]
    )
    kubeconfig = token_kubeconfig(kube_cluster, token, tmp_path / "kubeconfig")
    argv = [
        str(BIN / container["command"][0]),
        *container["args"],
        f"--kubeconfig={kubeconfig}",  # stands in for the Pod's in-cluster config
    ]
    log_path = tmp_path / "coordinator.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **pod_env(container, pod)},
        )
    try:
        lease = path(
            "coordination.k8s.io", "v1", "leases",
            namespace=namespace, name=f"{release.fullname}-coordinator",
        )  # fmt: skip

        def leader() -> str | None:
            try:
                holder: str | None = api.kube.request("GET", lease)["spec"].get("holderIdentity")
            except KubeError as err:
                if err.not_found:  # not taken yet
                    return None
                raise
            return holder

        holder = wait_until("the coordinator takes the chart's Lease", leader, timeout_seconds=120)
        assert holder.startswith(socket.gethostname())
        pod_path = path("", "v1", "pods", namespace=namespace, name=pod["metadata"]["name"])
        wait_until(
            "the leader labels its Pod as the serving one",
            lambda: (
                api.kube.request("GET", pod_path)["metadata"]["labels"].get(SERVING_LABEL) == "true"
            ),
            timeout_seconds=120,
        )
        service = api.kube.request(
            "GET",
            path("", "v1", "services", namespace=namespace, name=f"{release.fullname}-coordinator"),
        )
        labels = api.kube.request("GET", pod_path)["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()  # the Service reaches it
        name = f"{namespace}-chart"
        api.create_driver(gpudriver(name, namespace, simple_spec(namespace)))
        module = wait_until(
            "the GPUDriver becomes a Module",
            lambda: api.get_module(namespace, module_name(name)),
            timeout_seconds=120,
        )
        assert module["metadata"]["namespace"] == namespace
        # The leader made its own TLS Secret and published the CA for the agents.
        tls = release.tls_secret()
        assert sorted(tls) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
        configmap = api.kube.request(
            "GET",
            path(
                "", "v1", "configmaps",
                namespace=namespace, name=f"{release.fullname}-coordinator-ca",
            ),
        )  # fmt: skip
        assert configmap["data"]["ca.crt"].encode() == tls["ca.crt"]
    finally:
        process.send_signal(signal.SIGTERM)
        code: int | None
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
    log = log_path.read_text(errors="replace")
    assert code == 0, f"coordinator exit {code}; log:\n{log[-4000:]}"
    assert "forbidden" not in log.lower(), f"the chart's RBAC refused a call:\n{log[-4000:]}"
