"""A Kubernetes API that cannot be reached is said in one line, as kubectl says it, never in
urllib3's words (gpuctl/cli/kube_errors.py `unreachable`): the errors are urllib3's own, as its
pool raises them after its retries."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import urllib3
import yaml

from gpuctl.cli.kube_errors import unreachable
from testbed.agent_process import BIN

SERVER = "https://10.0.0.1:6443"


def retried(reason: Exception) -> urllib3.exceptions.MaxRetryError:
    return urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", reason)  # type: ignore[arg-type]


def test_a_refused_connection_names_the_server_and_asks_about_the_kubeconfig() -> None:
    refused = urllib3.exceptions.NewConnectionError(
        None,  # type: ignore[arg-type]
        "Failed to establish a new connection: [Errno 111] Connection refused",
    )
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert str(unreachable(SERVER, retried(refused))) == (
        "the connection to the server 10.0.0.1:6443 was refused: is the kubeconfig right?"
    )


def test_a_timeout_keeps_the_timeout_it_waited_for() -> None:
    slow = urllib3.exceptions.ReadTimeoutError(
        None,  # type: ignore[arg-type]
        "/api",
        "Read timed out. (read timeout=0.5)",
    )
    words = str(unreachable(SERVER, slow))
    assert words.startswith("the server 10.0.0.1:6443 did not answer in time (read timeout=0.5)")
    assert "HTTPSConnectionPool" not in words


def test_tls_and_names_that_do_not_resolve_say_what_to_check() -> None:
    tls = retried(urllib3.exceptions.SSLError(ssl.SSLCertVerificationError("self-signed")))
    assert "failed TLS" in str(unreachable(SERVER, tls))
    assert "certificate-authority" in str(unreachable(SERVER, tls))
    no_connection: Any = None
    unresolved = urllib3.exceptions.NameResolutionError(
        "api.example", no_connection, socket.gaierror(-2, "Name or service not known")
    )
    assert str(unreachable("https://api.example:6443", retried(unresolved))) == (
        "the server name in api.example:6443 does not resolve: is the kubeconfig right?"
    )


def test_anything_else_is_named_by_its_own_type_and_words() -> None:
    other = retried(urllib3.exceptions.ProtocolError("Connection aborted."))
    assert str(unreachable(SERVER, other)) == (
        f"cannot reach the Kubernetes API at {SERVER}: ProtocolError: Connection aborted."
    )


def test_the_cli_against_a_closed_port_says_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        done = subprocess.run(
            [str(BIN / "gpuctl"), "nodes", "--kubeconfig", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr == (
        f"gpuctl: the connection to the server 127.0.0.1:{port} was refused: "
        "is the kubeconfig right?\n"
    )
