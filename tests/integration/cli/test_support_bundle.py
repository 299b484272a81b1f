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
    api.kube.request(
        "POST",
        "/apis/gpuctl.dev/v1alpha1/gpunodes",
        body={
            "apiVersion": "gpuctl.dev/v1alpha1",
            "kind": "GPUNode",
            "metadata": {"name": gpunode},
        },
    )
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
