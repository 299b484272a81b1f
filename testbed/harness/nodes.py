"""Node objects for a control plane without kubelets.

A test creates the Nodes it needs; ``create_node`` also writes the status a kubelet would
report (Ready, kernel version), since KMM reads ``status.nodeInfo.kernelVersion``.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

DEFAULT_KERNEL = "6.8.0-45-generic"


def node_status(
    kernel_version: str,
    now: datetime.datetime,
    boot_id: str | None = None,
    *,
    ready: bool = True,
) -> dict[str, Any]:
    """The status body a healthy kubelet on ``kernel_version`` would report; ``boot_id``
    (default: a new one) changes when the node reboots, and KMM reads it. ``ready=False``:
    a kubelet just started, its runtime not ready yet (as after a reboot)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "written by the test harness",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        ],
        "nodeInfo": {
            "kernelVersion": kernel_version,
            "architecture": "amd64",
            "operatingSystem": "linux",
            # The OS the out-of-tree xe supports (else the GPUDriver warns: UnsupportedOS).
            "osImage": "Ubuntu 26.04 LTS",
            "containerRuntimeVersion": "containerd://test",
            "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "",
            "bootID": boot_id or str(uuid.uuid4()),
            "machineID": "",
            "systemUUID": "",
        },
    }


def create_node(
    api_client: Any,
    name: str,
    labels: Mapping[str, str],
    now: datetime.datetime,
    kernel_version: str = DEFAULT_KERNEL,
) -> Any:
    """Creates Node ``name`` with ``labels`` and a Ready status; returns the V1Node."""
    core: Any = k8s.CoreV1Api(api_client)
    core.create_node(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}
    )
    return core.patch_node_status(name, {"status": node_status(kernel_version, now)})
