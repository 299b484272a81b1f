"""How tests reach a running local control plane: as admin, as any user, or with a token.

``KubeCluster`` is what the ``kube_cluster`` fixture yields (``cluster.start_cluster`` makes
it). Clients it makes are ``kubernetes.client.ApiClient`` objects; close them (they are
context managers) or let ``close_clients`` do it at the end.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.harness import certs
from testbed.harness.kubeconfig import kubeconfig_document, write_private
from testbed.harness.layout import Layout
from testbed.harness.pki import load_ca

DEFAULT_TOKEN_SECONDS = 3600
_FILE_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class KubeCluster:
    """A running local control plane, seen from a test.

    Attributes: ``layout`` (its files), ``server`` (https://127.0.0.1:PORT). Properties:
    ``kubeconfig`` (admin, a client certificate in ``system:masters``) and ``ca_cert`` (PEM
    path of the CA that signed the API server's serving certificate).
    """

    layout: Layout
    server: str
    clock: Callable[[], datetime.datetime] = field(
        default=lambda: datetime.datetime.now(datetime.UTC)
    )
    _clients: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def kubeconfig(self) -> Path:
        return self.layout.admin_kubeconfig

    @property
    def ca_cert(self) -> Path:
        return self.layout.ca_cert

    def _configuration(self) -> Any:
        configuration = k8s.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.layout.ca_cert)
        configuration.verify_ssl = True
        return configuration

    def _track(self, api_client: Any) -> Any:
        with self._lock:
            self._clients.append(api_client)
        return api_client

    def admin_client(self) -> Any:
        """An ApiClient authenticated as the admin (group ``system:masters``)."""
        return self.user_client("gpuctl-admin", ("system:masters",), cert_name="admin")

    def user_client(
        self, user: str, groups: Sequence[str] = (), *, cert_name: str | None = None
    ) -> Any:
        """An ApiClient authenticated by a client certificate as ``user`` in ``groups``.

        Such a user has no permission beyond what RBAC grants ``user`` or its groups (and
        ``system:authenticated``, which the API server adds).
        """
        name = cert_name or _FILE_SAFE.sub("_", f"user-{user}-{'-'.join(groups)}")
        cert_path = self.layout.client_cert(name)
        key_path = self.layout.client_key(name)
        if not cert_path.exists():
            issued = certs.make_client_cert(load_ca(self.layout), self.clock(), user, tuple(groups))
            write_private(key_path, issued.key_pem)
            write_private(cert_path, issued.cert_pem)
        configuration = self._configuration()
        configuration.cert_file = str(cert_path)
        configuration.key_file = str(key_path)
        return self._track(k8s.ApiClient(configuration))

    def user_kubeconfig(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig file for ``user`` in ``groups`` (a new client certificate), for
        commands run as that user (RBAC applies)."""
        name = _FILE_SAFE.sub("_", f"kubeconfig-{user}-{'-'.join(groups)}")
        path = self.layout.client_cert(name).with_suffix(".kubeconfig")
        issued = certs.make_client_cert(load_ca(self.layout), self.clock(), user, tuple(groups))
        text = kubeconfig_document(self.server, self.layout.ca_cert.read_bytes(), user, issued)
        write_private(path, text.encode())
        return path

    def token_client(self, token: str) -> Any:
        """An ApiClient that authenticates with a bearer token (e.g. a ServiceAccount's)."""
        configuration = self._configuration()
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return self._track(k8s.ApiClient(configuration))

    def service_account_token(
        self,
        namespace: str,
        service_account: str,
        *,
        audiences: Sequence[str] = (),
        bound_pod: str | None = None,
        expiration_seconds: int = DEFAULT_TOKEN_SECONDS,
    ) -> str:
        """A token from the TokenRequest API, bound to Pod ``bound_pod`` when given.

        A token bound to a Pod that has ``spec.nodeName`` reviews (TokenReview) with the
        node's name in ``status.user.extra["authentication.kubernetes.io/node-name"]``.
        Empty ``audiences`` means the API server's own (its issuer URL).
        """
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        with self.admin_client() as api_client:
            core: Any = k8s.CoreV1Api(api_client)
            if bound_pod is not None:
                pod = core.read_namespaced_pod(bound_pod, namespace)
                spec["boundObjectRef"] = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": bound_pod,
                    "uid": pod.metadata.uid,
                }
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
            response = core.create_namespaced_service_account_token(
                service_account, namespace, body, _preload_content=False
            )
        token: str = json.loads(response.data)["status"]["token"]
        return token

    def service_account_client(self, namespace: str, service_account: str) -> Any:
        """An ApiClient acting as ServiceAccount ``namespace/service_account`` (RBAC applies)."""
        return self.token_client(self.service_account_token(namespace, service_account))

    def kubeconfig_text(self) -> str:
        """The admin kubeconfig, for tools that take it as a string."""
        return self.layout.admin_kubeconfig.read_text()

    def close_clients(self) -> None:
        """Closes every ApiClient this object made."""
        with self._lock:
            clients, self._clients = self._clients, []
        for api_client in clients:
            api_client.close()
