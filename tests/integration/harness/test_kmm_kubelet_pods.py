"""The stand-in kubelet reads only KMM's Pods, as a real kubelet is sent only its own.

KMM's Pods share their namespace with the workload's (the bench's GPU pods, the agents). A
kubelet that listed the whole namespace on each event of it cost the API server more the
more the workload churned - a drain's evictions - in the rollout's run and not in the floor's
(docs/benchmarks/notes-fleet-2026-12-04.md). It selects KMM's three kinds of Pod by label instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from testbed.harness.kubelet.catalogue import ImageCatalogue
from testbed.harness.kubelet.kubelet import (
    PULL_POD_LABEL,
    RESOURCE_TYPE_LABEL,
    WORKER_ACTION_LABEL,
    KmmKubelet,
)

pytestmark = pytest.mark.integration


def _pod(core: Any, namespace: str, name: str, labels: dict[str, str]) -> None:
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "nodeName": "gpu-0",
                "containers": [{"name": "c", "image": "registry.invalid/c:1"}],
            },
        },
    )


def test_the_kubelet_lists_kmms_pods_and_not_the_workloads(
    kube_admin: Any, namespace: str, tmp_path: Path
) -> None:
    core = k8s.CoreV1Api(kube_admin)
    _pod(core, namespace, "train", {"app": "train"})
    _pod(core, namespace, "agent", {"app": "gpuctl-agent"})
    _pod(core, namespace, "pull", {PULL_POD_LABEL: "pull"})
    _pod(core, namespace, "sign", {RESOURCE_TYPE_LABEL: "SignImage"})
    _pod(core, namespace, "worker", {WORKER_ACTION_LABEL: "Load"})
    kubelet = KmmKubelet(
        kube_admin,
        namespace,
        catalogue=ImageCatalogue(tmp_path / "images"),
        worker_binary=tmp_path / "worker",
        folder=tmp_path / "kubelet",
    )

    listed = sorted(pod["metadata"]["name"] for pod in kubelet.kmm_pods())

    assert listed == ["pull", "sign", "worker"]
