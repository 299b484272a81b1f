"""The coordinator's own TLS Secret and the CA ConfigMap the agents mount (`--tls-secret`).

The leader calls `ensure()` before it serves gRPC and again every `--tls-check-interval`:
it reads the Secret (kubernetes.io/tls: tls.crt, tls.key, ca.crt and the CA's key ca.key) and
makes what is missing or due (coordinator/live_nodes/tls/self_signed.py): a first CA and
certificate when there is no Secret, a new serving certificate under the same CA when it is
about to expire or the Service's names changed. Writes carry the resourceVersion read, so two
replicas cannot both win; the loser reads again and uses the winner's. Then it makes the
ConfigMap's `ca.crt` the Secret's CA. Only the CA's certificate leaves the Secret: the chart
never renders a key, and `helm template` renders the same objects every time.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coordinator.kube.client import KubeApi, KubeError, path
from coordinator.live_nodes.tls.self_signed import (
    CA_KEY,
    CA_KEY_KEY,
    CERT_KEY,
    KEY_KEY,
    Pem,
    ca_problem,
    issue_ca,
    issue_serving,
    serving_problem,
)

log = logging.getLogger(__name__)

ATTEMPTS = 5


@dataclass(frozen=True)
class ManagedTlsConfig:
    namespace: str
    secret: str
    ca_configmap: str
    dns_names: tuple[str, ...]
    check_seconds: float = 3600.0


def _decoded(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _encoded(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


class ManagedTls:
    """Keeps the Secret and the CA ConfigMap right; `ensure()` returns the serving pair."""

    def __init__(
        self, kube: KubeApi, config: ManagedTlsConfig, wall_clock: Callable[[], datetime]
    ) -> None:
        self._kube = kube
        self.config = config
        self._wall_clock = wall_clock
        self.issued = 0

    def _path(self, plural: str, name: str | None = None) -> str:
        return path("", "v1", plural, namespace=self.config.namespace, name=name)

    def _get(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            return self._kube.request("GET", self._path(plural, name))
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def ensure(self) -> Pem:
        """The serving certificate and key to serve with, made or renewed first if due."""
        for _ in range(ATTEMPTS):
            try:
                pem, ca = self._ensure_secret()
            except KubeError as err:
                if not err.conflict:
                    raise
                log.info("TLS Secret written meanwhile; reading it again")
                continue
            self._ensure_configmap(ca)
            return pem
        raise RuntimeError(f"the TLS Secret {self.config.secret} kept changing under us")

    def _ensure_secret(self) -> tuple[Pem, bytes]:
        now = self._wall_clock()
        secret = self._get("secrets", self.config.secret)
        data = _decoded(secret) if secret else {}
        why = serving_problem(data, self.config.dns_names, now) if data else "no Secret"
        if why is None:
            return Pem(data[CERT_KEY], data[KEY_KEY]), data[CA_KEY]
        ca_why = ca_problem(data, now)
        if ca_why is None:
            ca = Pem(data[CA_KEY], data[CA_KEY_KEY])
        else:
            ca = issue_ca(f"{self.config.secret}-ca", now)
        serving = issue_serving(ca, self.config.dns_names, now)
        fresh = {CERT_KEY: serving.cert, KEY_KEY: serving.key, CA_KEY: ca.cert, CA_KEY_KEY: ca.key}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": self.config.secret, "namespace": self.config.namespace},
            "data": _encoded(fresh),
        }
        if secret is None:
            self._kube.request("POST", self._path("secrets"), body=body)
        else:
            body["metadata"] = {**secret["metadata"]}
            self._kube.request("PUT", self._path("secrets", self.config.secret), body=body)
        self.issued += 1
        log.info(
            "TLS certificate issued",
            extra={"secret": self.config.secret, "why": why, "new_ca": ca_why is not None},
        )
        return serving, ca.cert

    def _ensure_configmap(self, ca: bytes) -> None:
        name = self.config.ca_configmap
        current = self._get("configmaps", name)
        text = ca.decode()
        if current is not None and (current.get("data") or {}).get(CA_KEY) == text:
            return
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.config.namespace},
            "data": {CA_KEY: text},
        }
        try:
            if current is None:
                self._kube.request("POST", self._path("configmaps"), body=body)
            else:
                body["metadata"] = {**current["metadata"]}
                self._kube.request("PUT", self._path("configmaps", name), body=body)
        except KubeError as err:
            if not err.conflict:
                raise
            log.info("CA ConfigMap written meanwhile; checked again at the next round")
            return
        log.info("CA ConfigMap written", extra={"configmap": name})


def service_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a client may dial the gRPC Service by."""
    return (
        f"{service}.{namespace}.svc",
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc.cluster.local",
    )
