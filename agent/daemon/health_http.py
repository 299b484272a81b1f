"""HTTP probes: GET /healthz (200 healthy, 503 not) and /readyz (200 connected, 503 not).

The body is JSON saying whether the agent is connected to the coordinator and since when.
Served by the standard library's HTTPServer in one daemon thread: the requests are rare
(kubelet probes) and each is answered from an in-memory HealthState. The thread blocks in
select() on the listening socket and a wake-up pipe instead of `serve_forever`, which wakes
every poll interval to check for shutdown: idle means no wake-ups at all.
"""

from __future__ import annotations

import http.server
import json
import os
import selectors
import threading

from agent.daemon.health import HealthState


def _handler_for(state: HealthState) -> type[http.server.BaseHTTPRequestHandler]:
    class ProbeHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            document: dict[str, object]
            if path == "/healthz":
                status = 200 if state.verdict().healthy else 503
                document = state.document()
            elif path == "/readyz":
                status = 200 if state.verdict().ready else 503
                document = state.document()
            else:
                status, document = 404, {"error": "only /healthz and /readyz live here"}
            body = (json.dumps(document) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds are not worth a log line each."""

    return ProbeHandler


class HealthHttpServer:
    """The probe server on (address, port), running in a daemon thread until stop()."""

    def __init__(self, state: HealthState, address: str, port: int) -> None:
        try:
            self._server = http.server.HTTPServer((address, port), _handler_for(state))
        except OSError as error:
            raise OSError(f"cannot listen for HTTP health on {address}:{port}: {error}") from None
        # Requests are handled only once select() said the socket is readable.
        self._server.timeout = 0
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="health-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server.fileno(), selectors.EVENT_READ, "request")
            selector.register(self._wake_read, selectors.EVENT_READ, "stop")
            while True:
                for key, _ in selector.select():
                    if key.data == "stop":
                        return
                    self._server.handle_request()

    def stop(self) -> None:
        os.write(self._wake_write, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._server.server_close()
        os.close(self._wake_read)
        os.close(self._wake_write)
