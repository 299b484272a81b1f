"""`--metrics-port`: the coordinator's Prometheus endpoint (`/metrics`, text format).

One registry per process, passed in (never prometheus_client's global one): the rollout's
metrics and, with live node reports, the agents' collector. Served on its own thread by
prometheus_client's HTTP server; a port that cannot be bound is a clear startup error.
"""

from __future__ import annotations

import argparse
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server


class MetricsServerError(OSError):
    """The metrics port could not be bound; the text says which."""


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://ADDR:PORT/metrics (default: not served)",
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",  # noqa: S104 - scraped from the pod IP
        metavar="ADDR",
        help="address the metrics server listens on (default: %(default)s)",
    )


def serve_metrics(
    address: str, port: int, registry: CollectorRegistry
) -> tuple[WSGIServer, threading.Thread]:
    try:
        return start_http_server(port, addr=address, registry=registry)
    except OSError as err:
        raise MetricsServerError(
            f"--metrics-port {port}: cannot listen on {address}: {err}"
        ) from err


def stop_metrics(server: WSGIServer) -> None:
    """Stop serving and close the listening socket."""
    server.shutdown()
    server.server_close()
