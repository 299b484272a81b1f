"""A real Prometheus server for one test, scraping a metrics endpoint the test serves.

`MetricsEndpoint` serves `/metrics` (Prometheus text) with one gauge the test sets,
`gpuctl_test_gpu_degraded`. `running_prometheus` starts the `prometheus` binary
(hack/prometheus/ensure installs Debian's; `GPUCTL_PROMETHEUS` names it) with a temporary
config that scrapes that endpoint every second and a rule file whose alert `GpuDegraded`
(severity critical) fires while the gauge is above 0, waits until it is ready, and stops it
afterwards. A missing binary fails the test with how to get it: it is never skipped.
`instant_queries` counts the instant queries the server has answered (its own
`prometheus_http_requests_total`), so a test can wait for a gate to have been asked again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testbed.harness.layout import LOOPBACK
from testbed.harness.ports import free_loopback_ports
from testbed.harness.processes import start_in_own_group, stop_child
from testbed.harness.waiting import wait_until

ALERT = "GpuDegraded"
FIRING_QUERY = f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}'


class MetricsEndpoint:
    """`/metrics` with `gpuctl_test_gpu_degraded{node="gpu-node-1"} <value>`."""

    def __init__(self) -> None:
        self.value = 0.0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (
                    "# TYPE gpuctl_test_gpu_degraded gauge\n"
                    f'gpuctl_test_gpu_degraded{{node="gpu-node-1"}} {endpoint.value:g}\n'
                ).encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def prometheus_binary() -> str:
    found = os.environ.get("GPUCTL_PROMETHEUS") or shutil.which("prometheus")
    if not found:
        raise AssertionError(
            "no prometheus binary: run hack/prometheus/ensure (hack/test does) or set "
            "GPUCTL_PROMETHEUS"
        )
    return found


def promtool_binary() -> str:
    """promtool beside the prometheus binary (Debian's package ships both), else on PATH."""
    beside = Path(prometheus_binary()).parent / "promtool"
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which("promtool")
    if not found:
        raise AssertionError(f"no promtool beside {prometheus_binary()} nor on PATH")
    return found


def query(url: str, promql: str) -> list[Any]:
    """The result of an instant query (raises on an error answer)."""
    address = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(address, timeout=10) as answer:  # noqa: S310
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def instant_queries(url: str) -> int:
    """How many instant queries (`/api/v1/query`) the server has answered so far."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:  # noqa: S310
        text = answer.read().decode()
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "prometheus_http_requests"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels.get("handler") == "/api/v1/query"
        )
    )


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running_prometheus(folder: Path, target_port: int) -> Iterator[str]:
    """Prometheus scraping 127.0.0.1:`target_port`; yields its base URL."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rules.yml").write_text(
        "groups:\n"
        "  - name: gpuctl-test\n"
        "    interval: 1s\n"
        "    rules:\n"
        f"      - alert: {ALERT}\n"
        "        expr: gpuctl_test_gpu_degraded > 0\n"
        "        labels: {severity: critical}\n"
    )
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{folder / 'rules.yml'}]\n"
        "scrape_configs:\n"
        "  - job_name: gpu-nodes\n"
        f"    static_configs: [{{targets: ['{LOOPBACK}:{target_port}']}}]\n"
    )
    [port] = free_loopback_ports(1)
    url = f"http://{LOOPBACK}:{port}"
    process = start_in_own_group(
        [
            prometheus_binary(),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--log.level=warn",
        ],
        folder / "prometheus.log",
        die_with_parent=True,
    )
    try:
        try:
            wait_until("prometheus is ready", lambda: _ready(url), timeout_seconds=60)
        except AssertionError as err:
            log = (folder / "prometheus.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"{err}\nprometheus log: {log}") from None
        yield url
    finally:
        stop_child(process)
