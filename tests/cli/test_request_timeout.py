"""--request-timeout reaches the API calls: against a server that accepts connections and never
answers, the command gives up with the timeout it was given, in the error it prints."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuctl.cli.source_flags import request_timeout_seconds

BIN = Path(sys.executable).parent


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts and then says nothing (an API server stuck behind a proxy)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=5)
    for connection in held:
        connection.close()
    listener.close()


def kubeconfig(tmp_path: Path, port: int) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "stuck",
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "insecure-skip-tls-verify": True,
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "stuck", "context": {"cluster": "stuck", "user": "u"}}],
        "current-context": "stuck",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize(
    "command",
    [("nodes",), ("rollout", "status", "x"), ("version",), ("support-bundle",)],
    ids=" ".join,
)
def test_each_command_gives_up_after_the_request_timeout(
    command: tuple[str, ...], silent_server: int, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path, silent_server)
    where = ("-f", str(tmp_path / "bundle.tgz")) if command[0] == "support-bundle" else ()
    done = subprocess.run(
        [
            *(str(BIN / "gpuctl"), *command, *where),
            *("--kubeconfig", str(config), "--request-timeout", "500ms"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "timeout=0.5" in done.stderr, done.stderr
    if command == ("version",):  # its own line first, as kubectl's, before the cluster fails
        assert done.stdout.startswith("Client:       gpuctl "), done.stdout


def test_a_timeout_is_a_duration_or_seconds_as_kubectls() -> None:
    assert request_timeout_seconds("30s") == 30.0
    assert request_timeout_seconds("1m30s") == 90.0
    assert request_timeout_seconds("2.5") == 2.5
    for bad in ("0", "0s", "-3", "soon", "5 minutes"):
        with pytest.raises(argparse.ArgumentTypeError):
            request_timeout_seconds(bad)


def test_a_timeout_that_is_not_a_positive_duration_is_refused() -> None:
    for bad in ("0", "-3", "soon"):
        done = subprocess.run(
            [str(BIN / "gpuctl"), "nodes", "--request-timeout", bad],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 2
        assert "--request-timeout" in done.stderr
