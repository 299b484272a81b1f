"""Asking a gate's Prometheus (coordinator/rollout/prometheus_query.py) over real sockets: the
bearer token from --prometheus-token-file goes out over https only, read afresh at each query;
the server is verified against --prometheus-ca-file; every way it cannot be asked comes back
in words naming the file or the url."""

from __future__ import annotations

import datetime
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coordinator.rollout.config import PrometheusAccess
from coordinator.rollout.prometheus_query import query_prometheus
from testbed.harness import certs

ANSWER = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


class Server:
    """A server on loopback answering every GET with ANSWER, keeping each Authorization."""

    def __init__(self, tls: certs.KeyPair | None, folder: Path) -> None:
        self.authorizations: list[str | None] = []
        seen = self.authorizations

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.headers.get("Authorization"))
                self.send_response(200)
                self.send_header("Content-Length", str(len(ANSWER)))
                self.end_headers()
                self.wfile.write(ANSWER)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            (folder / "tls.crt").write_bytes(tls.cert_pem)
            (folder / "tls.key").write_bytes(tls.key_pem)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def ca() -> certs.KeyPair:
    return certs.make_ca(datetime.datetime.now(datetime.UTC), "prometheus-test-ca")


@pytest.fixture
def https(ca: certs.KeyPair, tmp_path: Path) -> Iterator[Server]:
    server = Server(certs.make_serving_cert(ca, datetime.datetime.now(datetime.UTC)), tmp_path)
    yield server
    server.close()


@pytest.fixture
def ca_file(ca: certs.KeyPair, tmp_path: Path) -> Path:
    path = tmp_path / "ca.crt"
    path.write_bytes(ca.cert_pem)
    return path


def test_the_token_goes_out_as_bearer_over_verified_https_read_afresh_each_time(
    https: Server, ca_file: Path, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    access = PrometheusAccess(token_file=token, ca_file=ca_file)
    first = query_prometheus(access, https.url, "up", 5)
    token.write_text("rotated-token")  # the kubelet rotated the projected token
    second = query_prometheus(access, https.url, "up", 5)
    assert (first.status, first.body, first.error) == (200, ANSWER, "")
    assert second.status == 200
    assert https.authorizations == ["Bearer first-token", "Bearer rotated-token"]


def test_without_a_token_nothing_is_sent_and_http_still_works(tmp_path: Path) -> None:
    server = Server(None, tmp_path)
    try:
        answer = query_prometheus(PrometheusAccess(), server.url, "up", 5)
    finally:
        server.close()
    assert answer.status == 200
    assert server.authorizations == [None]


def test_the_token_is_never_sent_over_plain_http(tmp_path: Path) -> None:
    server = Server(None, tmp_path)
    token = tmp_path / "token"
    token.write_text("secret")
    try:
        answer = query_prometheus(PrometheusAccess(token_file=token), server.url, "up", 5)
    finally:
        server.close()
    assert answer.status is None
    assert answer.error == (
        "not sending the bearer token of --prometheus-token-file over plain http to "
        f"{server.url}: use an https:// url"
    )
    assert server.authorizations == []  # not asked at all


def test_a_missing_or_empty_token_file_is_named(
    https: Server, ca_file: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "gone"
    answer = query_prometheus(PrometheusAccess(missing, ca_file), https.url, "up", 5)
    assert answer.status is None
    assert answer.error.startswith(f"cannot read the Prometheus token file {missing}: ")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    answer = query_prometheus(PrometheusAccess(empty, ca_file), https.url, "up", 5)
    assert answer.error == f"the Prometheus token file {empty} is empty"
    assert https.authorizations == []


def test_a_server_the_ca_did_not_sign_is_not_asked(https: Server, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    other.write_bytes(certs.make_ca(datetime.datetime.now(datetime.UTC), "other").cert_pem)
    token = tmp_path / "token"
    token.write_text("secret")
    answer = query_prometheus(PrometheusAccess(token, other), https.url, "up", 5)
    assert answer.status is None
    assert "CERTIFICATE_VERIFY_FAILED" in answer.error
    assert https.authorizations == []  # the token never reached it
    broken = tmp_path / "broken-ca.crt"
    broken.write_text("not a certificate")
    answer = query_prometheus(PrometheusAccess(token, broken), https.url, "up", 5)
    assert answer.error.startswith(f"cannot use the Prometheus CA file {broken}: ")
