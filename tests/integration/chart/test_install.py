"""The chart installed with real `helm install` into the test API server: every object is
accepted and none holds a key, and the coordinator runs under exactly the chart's RBAC (its
ServiceAccount's token) and the chart's flags (the Deployment's args), making its own TLS
Secret and CA ConfigMap."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from coordinator.kube.client import KubeError, path
from gpuctl.common.names import SERVING_LABEL
from gpuctl.gpudriver.module_spec import module_name
from testbed.cluster_api import Api, gpudriver, simple_spec
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.chart_pods import running_coordinator
from tests.support.chart_release import Release

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def test_every_object_is_accepted_and_none_holds_a_key(release: Release) -> None:
    notes = release.install()
    assert f"DaemonSet {release.fullname}-agent" in notes
    assert f"helm test {release.name} -n {release.namespace}" in notes
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


def test_the_coordinator_runs_under_the_charts_rbac_and_flags(
    kube_cluster: KubeCluster, release: Release, api: Api, namespace: str, tmp_path: Path
) -> None:
    release.install()
    spec = release.deployment()["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == f"{release.fullname}-coordinator"
    # The test cluster runs no ReplicaSet controller (testbed/harness/flags.py): the test makes
    # the Pod it would, from the Deployment's template, and the coordinator plays it.
    with running_coordinator(kube_cluster, release, tmp_path) as coordinator:
        pod = coordinator.pod
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
        assert release.ca_configmap()["data"]["ca.crt"].encode() == tls["ca.crt"]
    log = coordinator.log_text()
    code = coordinator.exit_code
    assert code == 0, f"coordinator exit {code}; log:\n{log[-4000:]}"
    assert "forbidden" not in log.lower(), f"the chart's RBAC refused a call:\n{log[-4000:]}"
