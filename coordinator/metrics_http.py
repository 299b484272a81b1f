"""`--metrics-port`: the coordinator's HTTP endpoint: `/metrics`, `/healthz` and `/readyz`.

`/metrics` is Prometheus text from one registry per process, passed in (never
prometheus_client's global one): the rollout's metrics and, with live node reports, the
agents' collector. `/healthz` (liveness) and `/readyz` (readiness) answer 200 or 503 with a
one-line reason from the verdicts passed in (coordinator.health). Served on its own threads
(one per request, so a slow scrape never delays a probe); a port that cannot be bound is a
clear startup error.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from coordinator.health import Verdict

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
Check = Callable[[], Verdict]


class MetricsServerError(OSError):
    """The metrics port could not be bound; the text says which."""


@dataclass(frozen=True)
class HealthChecks:
    """What `/healthz` and `/readyz` answer."""

    liveness: Check
    readiness: Check


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://ADDR:PORT/metrics, and liveness and "
        "readiness at /healthz and /readyz (default: not served)",
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",  # noqa: S104 - scraped from the pod IP
        metavar="ADDR",
        help="address the metrics server listens on (default: %(default)s)",
    )


def _probe(check: Check, start_response: StartResponse) -> Iterable[bytes]:
    try:
        verdict = check()
    except Exception as err:  # a check that cannot decide is a failed check, never "ok"
        verdict = Verdict(False, f"check failed: {type(err).__name__}: {err}")
    status = "200 OK" if verdict.ok else "503 Service Unavailable"
    body = f"{'ok' if verdict.ok else 'failed'}: {verdict.reason}\n".encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body]


def http_app(registry: CollectorRegistry, health: HealthChecks) -> Callable[..., Iterable[bytes]]:
    """The WSGI application: the two probes by path, Prometheus for everything else."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        route = environ.get("PATH_INFO", "")
        if route == "/healthz":
            return _probe(health.liveness, start_response)
        if route == "/readyz":
            return _probe(health.readiness, start_response)
        result: Iterable[bytes] = metrics(environ, start_response)
        return result

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log line per probe or scrape on stderr (the logs are JSON lines)."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve_metrics(
    address: str, port: int, registry: CollectorRegistry, health: HealthChecks
) -> tuple[WSGIServer, threading.Thread]:
    try:
        server = make_server(
            address,
            port,
            http_app(registry, health),
            server_class=_ThreadingServer,
            handler_class=_QuietHandler,
        )
    except OSError as err:
        raise MetricsServerError(
            f"--metrics-port {port}: cannot listen on {address}: {err}"
        ) from err
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread


def stop_metrics(server: WSGIServer) -> None:
    """Stop serving and close the listening socket."""
    server.shutdown()
    server.server_close()
