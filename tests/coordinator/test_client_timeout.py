"""A request given a timeout is sent once: a read that timed out is not retried.

urllib3 retries a timed-out read three times by default, so a Lease renewal given the time
left before its renew deadline took four times that. The server here accepts connections and
reads requests but never answers; it counts the requests it got.
"""

from __future__ import annotations

import socket
import threading

import pytest
from kubernetes.client import ApiClient, Configuration

from coordinator.kube.client import Kube, KubeError


class SilentServer:
    """Accepts, reads, never answers; `requests` counts request heads received."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.requests = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.requests += data.count(b"HTTP/1.1\r\n")

    def close(self) -> None:
        self._listener.close()
        for conn in self._open:
            conn.close()


def test_a_request_that_timed_out_is_not_sent_again() -> None:
    server = SilentServer()
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    kube = Kube(ApiClient(configuration))
    try:
        with pytest.raises(KubeError) as raised:
            kube.request("GET", "/apis/coordination.k8s.io/v1/leases", timeout=0.3)
        assert raised.value.status == 0
        assert server.requests == 1
    finally:
        server.close()


def test_no_time_left_sends_nothing() -> None:
    server = SilentServer()
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    kube = Kube(ApiClient(configuration))
    try:
        with pytest.raises(KubeError, match="no time left"):
            kube.request("PUT", "/api/v1/nodes/n", body={}, timeout=0.0)
        assert server.requests == 0
    finally:
        server.close()
