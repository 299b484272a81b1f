"""KMM's own webhook server, registered with the test API server for the namespaces it serves.

KMM's admission rules run in its ``webhook-server`` binary (``--enable-module``: a Module's
kernel mappings, version toggles and name lengths; ``--enable-namespace``: no deleting a
namespace KMM labelled ``kmm.node.k8s.io/contains-modules``). ``KmmWebhook`` runs it with a
serving certificate of the harness's own CA (controller-runtime reads
``$TMPDIR/k8s-webhook-server/serving-certs/tls.{crt,key}``) and registers it by URL in a
ValidatingWebhookConfiguration, as KMM's ``config/webhook/manifests.yaml`` does - failure
policy ``Fail`` - but scoped by a namespace selector (``scope``): one test's namespace for
a test that runs KMM of its own (stopping it, the webhook down, disturbs no other test), or the
label of the namespaces the control plane's shared KMM serves (``shared_kmm``). ``stop``
unregisters it first.
"""

from __future__ import annotations

import base64
import datetime
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.harness import certs
from testbed.harness.kmm_build import KmmBuild
from testbed.harness.kmm_operator import controller_config, start_kmm_binary
from testbed.harness.ports import free_loopback_ports
from testbed.harness.processes import kill_child, stop_child
from testbed.harness.waiting import wait_until

NAMESPACE_LABEL = "kmm.node.k8s.io/contains-modules"
MODULE_PATH = "/validate-kmm-sigs-x-k8s-io-v1beta1-module"
NAMESPACE_PATH = "/validate--v1-namespace"
READY_TIMEOUT_SECONDS = 60.0
HTTP_NOT_FOUND = 404


def namespace_scope(namespace: str) -> dict[str, str]:
    """The selector of one namespace (its name label, which the API server sets)."""
    return {"kubernetes.io/metadata.name": namespace}


def webhook_configuration(
    name: str, scope: Mapping[str, str], port: int, ca_pem: bytes
) -> dict[str, Any]:
    def hook(
        hook_name: str, path: str, rule: dict[str, Any], labels: dict[str, str]
    ) -> dict[str, Any]:
        return {
            "name": hook_name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            },
            "rules": [rule],
            "namespaceSelector": {"matchLabels": labels},
        }

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            hook(
                "vmodule.kb.io",
                MODULE_PATH,
                {
                    "apiGroups": ["kmm.sigs.x-k8s.io"],
                    "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["modules"],
                },
                dict(scope),
            ),
            hook(
                "namespace-deletion.kmm.sigs.k8s.io",
                NAMESPACE_PATH,
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["DELETE"],
                    "resources": ["namespaces"],
                },
                {**scope, NAMESPACE_LABEL: ""},
            ),
        ],
    }


class KmmWebhook:
    """KMM's webhook server for the namespaces ``scope`` selects, registered as ``name``, on
    ``port``; its own ConfigMap moves its health and metrics ports off the manager's."""

    def __init__(
        self,
        build: KmmBuild,
        api_client: Any,
        kubeconfig: Path,
        folder: Path,
        *,
        operator_namespace: str,
        port: int,
        name: str,
        scope: Mapping[str, str],
    ) -> None:
        self.build = build
        self._core: Any = k8s.CoreV1Api(api_client)
        self._admission: Any = k8s.AdmissionregistrationV1Api(api_client)
        self._kubeconfig = kubeconfig
        self.folder = folder
        self.port = port
        self.scope = dict(scope)
        self._operator_namespace = operator_namespace
        self.name = name
        # Not the webhook port (nothing listens on it yet, so a second draw could pick it).
        self._health_port, self._metrics_port = free_loopback_ports(2, besides=(port,))
        self.process: subprocess.Popen[bytes] | None = None
        ca = certs.make_ca(datetime.datetime.now(datetime.UTC), "kmm-webhook-test-ca")
        self._ca_pem = ca.cert_pem
        serving = certs.make_serving_cert(ca, datetime.datetime.now(datetime.UTC))
        cert_dir = folder / "webhook-tmp" / "k8s-webhook-server" / "serving-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
        (cert_dir / "tls.key").write_bytes(serving.key_pem)

    @property
    def log(self) -> Path:
        return self.folder / "kmm-webhook.log"

    def start(self) -> None:
        """Starts the server, waits until it answers, then registers it."""
        self.process = start_kmm_binary(
            [str(self.build.webhook_server), "--enable-module", "--enable-namespace"],
            core=self._core,
            operator_namespace=self._operator_namespace,
            config_map=self.name,
            config=controller_config(self._health_port, self._metrics_port, self.port),
            kubeconfig=self._kubeconfig,
            log=self.log,
            environ={"TMPDIR": str(self.folder / "webhook-tmp")},
        )
        wait_until(
            f"KMM's webhook server listens on port {self.port} (log: {self.log})",
            self._listening,
            timeout_seconds=READY_TIMEOUT_SECONDS,
            interval_seconds=0.1,
        )
        self.register()

    def _listening(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"KMM's webhook server exited: {self.log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def register(self) -> None:
        body = webhook_configuration(self.name, self.scope, self.port, self._ca_pem)
        try:
            self._admission.create_validating_webhook_configuration(body)
        except k8s.ApiException as error:
            if error.status != 409:
                raise

    def unregister(self) -> None:
        try:
            self._admission.delete_validating_webhook_configuration(self.name)
        except k8s.ApiException as error:
            if error.status != HTTP_NOT_FOUND:
                raise

    def kill(self) -> None:
        """SIGKILL, still registered: every Module write in its namespaces is refused."""
        if self.process is not None:
            kill_child(self.process)

    def stop(self) -> None:
        self.unregister()
        if self.process is not None:
            stop_child(self.process)
            self.process = None
