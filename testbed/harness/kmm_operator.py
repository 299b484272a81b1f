"""KMM's own manager running beside the test control plane, as a process tests may kill.

``KmmOperator`` runs ``bin/manager`` of a KMM build (``kmm_build``) the way KMM's Deployment
does, less what a process outside a cluster cannot have: its namespace (``OPERATOR_NAMESPACE``),
the images its Deployment names - ``RELATED_IMAGE_WORKER`` (its worker Pods'; the kubelet runs
the worker binary of the same build for it), ``RELATED_IMAGE_BUILD`` (kaniko: the container of
its build and sign Pods) and ``RELATED_IMAGE_SIGN`` (the image with ``sign-file`` its sign
Dockerfile builds from; the kubelet plays both, testbed/harness/kubelet/sign_pod.py) - and
``--config`` naming a ConfigMap whose ``controller_config.yaml`` turns leader election off (no
Lease outside a cluster), serves health and plain-HTTP metrics on loopback ports, and keeps
KMM's worker defaults (root, ``/lib/firmware``). ``start`` waits until ``/readyz`` answers;
``kill`` is a SIGKILL (nothing flushed), after which ``start`` starts it again. One manager
serves every namespace, as in a cluster; the fixtures start one per test.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from testbed.harness.kmm_build import KmmBuild
from testbed.harness.ports import free_loopback_ports
from testbed.harness.processes import kill_child, start_in_own_group, stop_child
from testbed.harness.waiting import wait_until

CONFIG_MAP = "kmm-operator-manager-config"
WORKER_IMAGE = "registry.k8s.io/kmm/kernel-module-management-worker:test"
KANIKO_IMAGE = "gcr.io/kaniko-project/executor:test"
SIGN_IMAGE = "registry.k8s.io/kmm/kernel-module-management-signimage:test"
READY_TIMEOUT_SECONDS = 60.0
HTTP_CONFLICT = 409


def controller_config(health_port: int, metrics_port: int, webhook_port: int) -> str:
    return yaml.safe_dump(
        {
            "healthProbeBindAddress": f"127.0.0.1:{health_port}",
            "webhookPort": webhook_port,
            "leaderElection": {"enabled": False, "resourceID": "kmm.sigs.x-k8s.io"},
            "metrics": {
                "bindAddress": f"127.0.0.1:{metrics_port}",
                "enableAuthnAuthz": False,
                "secureServing": False,
            },
            "worker": {"runAsUser": 0, "seLinuxType": "spc_t", "firmwareHostPath": "/lib/firmware"},
        }
    )


def write_config_map(core: Any, namespace: str, name: str, config: str) -> None:
    """Creates (or replaces) ConfigMap ``name`` holding KMM's ``controller_config.yaml``, and
    its namespace if need be."""
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except k8s.ApiException as error:
        if error.status != HTTP_CONFLICT:
            raise
    body = {"metadata": {"name": name}, "data": {"controller_config.yaml": config}}
    try:
        core.create_namespaced_config_map(namespace, body)
    except k8s.ApiException as error:
        if error.status != HTTP_CONFLICT:
            raise
        core.replace_namespaced_config_map(name, namespace, body)


def start_kmm_binary(
    argv: list[str],
    *,
    core: Any,
    operator_namespace: str,
    config_map: str,
    config: str,
    kubeconfig: Path,
    log: Path,
    environ: dict[str, str],
) -> subprocess.Popen[bytes]:
    """Writes ``config`` into ``config_map`` and starts a KMM binary reading it (``--config``),
    as KMM's Deployments run it; ``environ`` adds to what every KMM binary needs."""
    write_config_map(core, operator_namespace, config_map, config)
    with log.open("ab") as stream:
        stream.write(f"--- start {' '.join(argv)}\n".encode())
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "OPERATOR_NAMESPACE": operator_namespace,
        **environ,
    }
    return start_in_own_group(
        [*argv, f"--config={config_map}"], log, die_with_parent=True, environ=env
    )


class KmmOperator:
    """KMM's manager against the API server of ``kubeconfig``; logs to ``folder``."""

    def __init__(
        self,
        build: KmmBuild,
        api_client: Any,
        kubeconfig: Path,
        folder: Path,
        namespace: str = "kmm-operator-system",
    ) -> None:
        self.build = build
        self._core: Any = k8s.CoreV1Api(api_client)
        self._kubeconfig = kubeconfig
        self.folder = folder
        self.namespace = namespace
        self.health_port, self.metrics_port, self.webhook_port = free_loopback_ports(3)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.folder / "kmm-manager.log"

    def start(self) -> None:
        """Starts the manager and waits until it says it is ready."""
        self.starts += 1
        config = controller_config(self.health_port, self.metrics_port, self.webhook_port)
        self.process = start_kmm_binary(
            [str(self.build.manager), "--v=1"],
            core=self._core,
            operator_namespace=self.namespace,
            config_map=CONFIG_MAP,
            config=config,
            kubeconfig=self._kubeconfig,
            log=self.log,
            environ={
                "RELATED_IMAGE_WORKER": WORKER_IMAGE,
                "RELATED_IMAGE_BUILD": KANIKO_IMAGE,
                "RELATED_IMAGE_SIGN": SIGN_IMAGE,
            },
        )
        wait_until(
            f"KMM's manager answers /readyz on port {self.health_port} (log: {self.log})",
            self._ready,
            timeout_seconds=READY_TIMEOUT_SECONDS,
            interval_seconds=0.1,
        )

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"KMM's manager exited: {tail}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=2
            ) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL: KMM stops mid-reconcile, its in-flight work left as it was."""
        if self.process is not None:
            kill_child(self.process)

    def stop(self) -> None:
        if self.process is not None:
            stop_child(self.process)
            self.process = None
