"""`gpuctl support-bundle` against the real API server: every kind it promises, Events, what it
could not read named in errors.txt (a Pod without a kubelet has no log), and never a Secret,
whatever Secrets the namespace holds."""

from __future__ import annotations

import base64
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster_api import Api, gpudriver, simple_spec
from testbed.harness.access import KubeCluster
from testbed.harness.rbac_grants import granted, user

pytestmark = pytest.mark.integration

GPUCTL = str(Path(sys.executable).parent / "gpuctl")


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        root = members[0].name.split("/")[0]
        assert all(m.name.startswith(f"{root}/") for m in members)
        return {
            m.name.removeprefix(f"{root}/"): archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in members
        }


def add_gpunode(api: Api, name: str) -> None:
    body = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GPUNode", "metadata": {"name": name}}
    api.kube.request("POST", "/apis/gpuctl.dev/v1alpha1/gpunodes", body=body)


def support_bundle(
    kubeconfig: Path, namespace: str, archive: Path
) -> subprocess.CompletedProcess[str]:
    """`gpuctl support-bundle` for `namespace` into `archive`, as the kubeconfig's user."""
    return subprocess.run(
        [
            *(GPUCTL, "support-bundle", "--namespace", namespace, "-f", str(archive)),
            *("--kubeconfig", str(kubeconfig)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_bundle_holds_the_fleet_and_no_secret(
    kube_cluster: KubeCluster, namespace: str, api: Api, tmp_path: Path
) -> None:
    driver = f"{namespace}-gpu"
    api.create_driver(gpudriver(driver, namespace, simple_spec(namespace)))
    gpunode = f"{namespace}-node"
    add_gpunode(api, gpunode)
    secret_value = f"do-not-ship-{namespace}"
    api.kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        body={
            "metadata": {"name": "signing-key", "labels": {"app.kubernetes.io/name": "gpuctl"}},
            "stringData": {"key.pem": secret_value},
        },
    )
    pod: dict[str, Any] = {
        "metadata": {"name": "gpuctl-agent-x", "labels": {"app.kubernetes.io/name": "gpuctl"}},
        "spec": {"containers": [{"name": "agent", "image": "gpuctl-agent:0.1.0"}]},
    }
    api.kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    api.kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/events",
        body={
            "metadata": {"name": "gpuctl-test-event"},
            "involvedObject": {
                "kind": "GPUDriver",
                "name": driver,
                "namespace": namespace,
                "apiVersion": "gpuctl.dev/v1alpha1",
            },
            "reason": "RolloutPaused",
            "message": "paused for the test",
            "type": "Normal",
        },
    )
    path = tmp_path / "bundle.tar.gz"
    try:
        done = support_bundle(kube_cluster.kubeconfig, namespace, path)
    finally:
        api.kube.request("DELETE", f"/apis/gpuctl.dev/v1alpha1/gpunodes/{gpunode}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {path}: ")
    files = read_archive(path)
    for kind in ("gpudrivers", "gpunodes", "modules", "nodemodulesconfigs", "moduleimagesconfigs"):
        assert f"{kind}.yaml" in files, sorted(files)
    drivers = yaml.safe_load(files["gpudrivers.yaml"])
    assert driver in [d["metadata"]["name"] for d in drivers["items"]]
    assert gpunode in [
        n["metadata"]["name"] for n in yaml.safe_load(files["gpunodes.yaml"])["items"]
    ]
    assert yaml.safe_load(files["nodes.yaml"])["kind"] == "List"
    events = yaml.safe_load(files["events.yaml"])["items"]
    assert any(
        e["reason"] == "RolloutPaused" and e["involvedObject"]["name"] == driver for e in events
    )
    versions = yaml.safe_load(files["versions.yaml"])
    assert versions["coordinator"]["version"] is None  # no coordinator ran here: unknown
    # The Pod has no kubelet: the API server serves its log empty, and it is there, empty.
    assert files["logs/gpuctl-agent-x_agent.log"] == b""
    assert files["errors.txt"] == b""
    # No Secret, in any form.
    encoded = base64.b64encode(secret_value.encode())
    for name, data in files.items():
        assert secret_value.encode() not in data, name
        assert encoded not in data, name
    assert not [n for n in files if "secret" in n.lower()]


def test_what_the_caller_may_not_read_is_named_and_the_rest_collected(
    kube_cluster: KubeCluster, namespace: str, api: Api, tmp_path: Path
) -> None:
    """A user who may read GPUDrivers and GPUNodes only: those are collected, and errors.txt
    names each thing refused (no empty file stands for what could not be read)."""
    reader = f"{namespace}-reader"
    rules = [
        {
            "apiGroups": ["gpuctl.dev"],
            "resources": ["gpudrivers", "gpunodes"],
            "verbs": ["get", "list"],
        }
    ]
    path = tmp_path / "bundle.tar.gz"
    with granted(api.kube, reader, rules, user(reader)):
        done = support_bundle(kube_cluster.user_kubeconfig(reader), namespace, path)
    assert done.returncode == 0, done.stderr
    assert "could not be read (errors.txt)" in done.stdout
    files = read_archive(path)
    assert {"gpudrivers.yaml", "gpunodes.yaml"} <= set(files)
    assert not {"nodes.yaml", "modules.yaml"} & set(files)
    errors = files["errors.txt"].decode()
    for refused in (
        "nodes:",
        "modules.kmm.sigs.x-k8s.io:",
        f"pods in {namespace}:",
        "events of GPUDrivers:",
    ):
        assert refused in errors, errors


def test_the_bundle_answers_kmms_side_of_a_blocked_node(
    kube_cluster: KubeCluster, namespace: str, api: Api, tmp_path: Path
) -> None:
    """KMM's worker Pod in the release namespace (restarted once: its previous container's log
    is asked for too), KMM's operator Pod, a GPU node's Event, gpuctl's Deployment and
    admission guard: each in its file, README.txt naming every file, the rest untouched."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    worker = {
        "metadata": {
            "name": "kmm-worker-gpu-3-gpu-gpu",
            "labels": {"kmm.node.kubernetes.io/worker-action": "Load"},
        },
        "spec": {"containers": [{"name": "worker", "image": "kmm-worker:v2.6.0"}]},
    }
    api.kube.request("POST", pods, body=worker)
    restarted = {
        "containerStatuses": [
            {
                "name": "worker",
                "image": "kmm-worker:v2.6.0",
                "imageID": "",
                "ready": False,
                "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ]
    }
    api.kube.request(
        "PATCH",
        f"{pods}/kmm-worker-gpu-3-gpu-gpu/status",
        body={"status": restarted},
        content_type="application/merge-patch+json",
    )
    operator = {
        "metadata": {"name": "kmm-operator-manager-0", "labels": {"app.kubernetes.io/name": "kmm"}},
        "spec": {"containers": [{"name": "manager", "image": "kmm-operator:v2.6.0"}]},
    }
    api.kube.request("POST", pods, body=operator)
    gpunode = f"{namespace}-gpu-3"
    other = f"{namespace}-cpu-1"
    add_gpunode(api, gpunode)
    # A Node's Events are in `default`, as the kubelet and the node controller write them.
    for node, reason in ((gpunode, "Rebooted"), (other, "NodeNotReady")):
        api.kube.request(
            "POST",
            "/api/v1/namespaces/default/events",
            body={
                "metadata": {"name": f"{node}.event"},
                "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
                "reason": reason,
                "message": f"Node {node} has been rebooted",
                "type": "Warning",
            },
        )
    labels = {"app.kubernetes.io/name": "gpuctl"}
    api.kube.request(
        "POST",
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        body={
            "metadata": {"name": "gpuctl-coordinator", "labels": labels},
            "spec": {
                "selector": {"matchLabels": {"app": namespace}},
                "template": {
                    "metadata": {"labels": {"app": namespace}},
                    "spec": {"containers": [{"name": "c", "image": "gpuctl-coordinator:0.1.0"}]},
                },
            },
        },
    )
    policy = f"{namespace}-kmm-worker-hold"
    api.kube.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        body={
            "metadata": {"name": policy, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "validations": [{"expression": "true"}],
            },
        },
    )
    path = tmp_path / "bundle.tar.gz"
    try:
        done = support_bundle(kube_cluster.kubeconfig, namespace, path)
    finally:
        api.kube.request("DELETE", f"/apis/gpuctl.dev/v1alpha1/gpunodes/{gpunode}")
        api.kube.request(
            "DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy}"
        )
        for node in (gpunode, other):
            api.kube.request("DELETE", f"/api/v1/namespaces/default/events/{node}.event")
    assert done.returncode == 0, done.stderr
    files = read_archive(path)
    kmm = yaml.safe_load(files["kmm-pods.yaml"])["items"]
    assert [p["metadata"]["name"] for p in kmm] == ["kmm-worker-gpu-3-gpu-gpu"]
    assert "logs/kmm/kmm-worker-gpu-3-gpu-gpu_worker.log" in files
    # Its previous container's log was asked for: there (empty, no kubelet), or said why not.
    errors = files["errors.txt"].decode()
    previous = "logs/kmm/kmm-worker-gpu-3-gpu-gpu_worker.previous.log"
    assert previous in files or "previous log of" in errors, (sorted(files), errors)
    operators = yaml.safe_load(files["kmm-operator-pods.yaml"])["items"]
    assert "kmm-operator-manager-0" in [p["metadata"]["name"] for p in operators]
    assert "logs/kmm-operator/kmm-operator-manager-0_manager.log" in files
    node_events = yaml.safe_load(files["node-events.yaml"])["items"]
    assert [e["involvedObject"]["name"] for e in node_events] == [gpunode]
    workloads = yaml.safe_load(files["workloads.yaml"])["items"]
    assert [w["metadata"]["name"] for w in workloads] == ["gpuctl-coordinator"]
    admission = yaml.safe_load(files["admission.yaml"])["items"]
    assert policy in [a["metadata"]["name"] for a in admission]
    readme = files["README.txt"].decode()
    for name in files:
        if not name.startswith("logs/") and name != "README.txt":
            assert name in readme, name
