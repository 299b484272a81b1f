"""Waits until a control-plane component answers its health endpoint.

Uses plain HTTP(S) requests with the cluster's CA and a client certificate, not the
kubernetes client, so it works before anything else is up. A component whose process has
exited fails the wait at once with the tail of its log.
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

POLL_SECONDS = 0.1
LOG_TAIL_LINES = 30


class ComponentFailedError(RuntimeError):
    """A control-plane process exited or never became healthy."""


def log_tail(log_file: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def tls_context(ca_file: Path, cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    if cert_file is not None and key_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file))
    return context


def insecure_loopback_context() -> ssl.SSLContext:
    """For kube-controller-manager's self-signed loopback /healthz, which carries no data."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _answers_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def wait_healthy(
    name: str,
    url: str,
    process: subprocess.Popen[bytes],
    *,
    log_file: Path,
    timeout_seconds: float,
    context: ssl.SSLContext | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Polls ``url`` until it answers 200; raises if ``process`` exits or time runs out."""
    deadline = clock() + timeout_seconds
    while True:
        if process.poll() is not None:
            raise ComponentFailedError(
                f"{name} exited with {process.returncode}; last lines of {log_file}:\n"
                f"{log_tail(log_file)}"
            )
        if _answers_ok(url, context):
            return
        if clock() > deadline:
            raise ComponentFailedError(
                f"{name} not healthy at {url} after {timeout_seconds:.0f}s; last lines of "
                f"{log_file}:\n{log_tail(log_file)}"
            )
        time.sleep(POLL_SECONDS)
