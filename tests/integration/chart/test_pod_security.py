"""The agent needs its namespace at Pod Security "privileged": a real `helm install` into a
namespace enforcing baseline fails with how to fix it, and podSecurity.labelNamespace makes the
chart label the namespace itself (adopted with --take-ownership, kept on uninstall)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, path
from testbed.harness.access import KubeCluster
from tests.support.chart_release import Release, chart_release
from tests.support.helm import HelmError

pytestmark = pytest.mark.integration

ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    kube = Kube(kube_admin)
    kube.request(
        "PATCH",
        path("", "v1", "namespaces", name=namespace),
        body={"metadata": {"labels": {ENFORCE: "baseline"}}},
        content_type=MERGE_PATCH,
    )
    with chart_release(kube_cluster, kube, namespace, tmp_path, {}) as installed:
        yield installed


def labels_of(release: Release) -> dict[str, str]:
    namespace = release.kube.request("GET", path("", "v1", "namespaces", name=release.namespace))
    return dict(namespace["metadata"].get("labels") or {})


def test_a_baseline_namespace_is_refused_with_the_fix(release: Release) -> None:
    with pytest.raises(HelmError) as refused:
        release.install()
    message = refused.value.stderr
    assert f'namespace {release.namespace} enforces Pod Security "baseline"' in message
    fix = f"kubectl label namespace {release.namespace} {ENFORCE}=privileged --overwrite"
    assert fix in message
    assert release.helm.run("list", "--namespace", release.namespace, "--short") == ""

    # The fix the message gives works.
    release.kube.request(
        "PATCH",
        path("", "v1", "namespaces", name=release.namespace),
        body={"metadata": {"labels": {ENFORCE: "privileged"}}},
        content_type=MERGE_PATCH,
    )
    release.install()


def test_label_namespace_adopts_and_labels_it_and_keeps_it(release: Release) -> None:
    notes = release.install("--set", "podSecurity.labelNamespace=true", "--take-ownership")
    assert "This release labels it so." in notes
    labels = labels_of(release)
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"

    release.uninstall()

    assert labels_of(release)[ENFORCE] == "privileged"  # still there: resource-policy keep
