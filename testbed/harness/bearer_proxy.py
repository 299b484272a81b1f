"""A TLS proxy in front of a test Prometheus that demands a Kubernetes bearer token, as
OpenShift's thanos-querier does through kube-rbac-proxy.

kube-rbac-proxy itself is what OpenShift runs there, but the Go module proxy refuses its module
path (`go list -m -versions github.com/brancz/kube-rbac-proxy`: 403 Forbidden), so this stands
in for it, doing what it does with the real API server: every request needs `Authorization:
Bearer <token>`; the token is reviewed (TokenReview; 401 when it is missing or not
authenticated) and its user must be allowed `get` on `prometheuses/api` in group
`monitoring.coreos.com` (SubjectAccessReview; 403 otherwise: what OpenShift's
cluster-monitoring-view role grants). An allowed GET is passed to the Prometheus behind and its
answer relayed. It serves TLS with a certificate of its own test CA (`ca_pem`), so a client
must be given that CA. Every request's path and answer code are recorded.
"""

from __future__ import annotations

import contextlib
import http.client
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from coordinator.kube.client import Kube
from testbed.harness.layout import LOOPBACK
from testbed.harness.serving_tls import serving_tls

# What the proxy asks the API server about the token's user (kube-rbac-proxy's
# resourceAttributes for thanos-querier, as cluster-monitoring-view grants them).
RESOURCE = {"group": "monitoring.coreos.com", "resource": "prometheuses", "subresource": "api"}


@dataclass
class BearerProxy:
    """A running proxy: its https base URL, its CA, and what it answered."""

    url: str
    ca_pem: bytes
    answered: list[tuple[str, int]] = field(default_factory=list)

    def codes(self) -> list[int]:
        return [code for _, code in self.answered]


def _review(kube: Kube, token: str) -> dict[str, Any]:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    answer: dict[str, Any] = kube.request(
        "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body
    )
    return dict(answer.get("status") or {})


def _allowed(kube: Kube, user: dict[str, Any]) -> bool:
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.get("username", ""),
            "uid": user.get("uid", ""),
            "groups": user.get("groups") or [],
            "extra": user.get("extra") or {},
            "resourceAttributes": {**RESOURCE, "verb": "get"},
        },
    }
    answer = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
    return bool((answer.get("status") or {}).get("allowed"))


@contextlib.contextmanager
def bearer_proxy(kube: Kube, upstream: str, folder: Path) -> Iterator[BearerProxy]:
    """The proxy in front of the Prometheus at `upstream` (http://host:port), on a free
    loopback port, reviewing tokens with `kube` (an account that may create TokenReviews and
    SubjectAccessReviews)."""
    tls = serving_tls(folder)
    target = urlsplit(upstream)
    answered: list[tuple[str, int]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            answered.append((self.path, code))
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not token:
                self._answer(401, b"Unauthorized: no bearer token\n")
                return
            review = _review(kube, token)
            if not review.get("authenticated"):
                self._answer(401, b"Unauthorized: " + str(review.get("error", "")).encode())
                return
            user = dict(review.get("user") or {})
            if not _allowed(kube, user):
                words = (
                    f"Forbidden (user={user.get('username')}, verb=get, "
                    "resource=prometheuses, subresource=api)\n"
                )
                self._answer(403, words.encode())
                return
            connection = http.client.HTTPConnection(
                target.hostname or LOOPBACK, target.port, timeout=10
            )
            try:
                connection.request("GET", self.path)
                upstream_answer = connection.getresponse()
                self._answer(
                    upstream_answer.status,
                    upstream_answer.read(),
                    upstream_answer.getheader("Content-Type") or "application/json",
                )
            finally:
                connection.close()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.files.cert_file, tls.files.key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="bearer-proxy", daemon=True)
    thread.start()
    try:
        yield BearerProxy(f"https://{LOOPBACK}:{server.server_address[1]}", tls.ca_pem, answered)
    finally:
        server.shutdown()
        server.server_close()
