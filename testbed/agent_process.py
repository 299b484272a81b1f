"""A real `gpuctl-agent run` process for integration tests: TLS to a coordinator on loopback,
a fake host root, no udev (changes come by rescan or request), no health ports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

BIN = Path(sys.executable).parent


def start_agent_process(
    *,
    port: int,
    ca_file: Path,
    token_file: Path,
    host_root: Path,
    node: str,
    log: IO[Any],
    backoff_initial: float = 0.2,
    backoff_max: float = 1.0,
    extra_args: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """`gpuctl-agent run` for `node` against the coordinator on localhost:`port`; its stderr
    (JSON logs) goes to `log`. NODE_NAME is dropped so `--node-name` is the only source;
    `extra_args` are more flags (e.g. `--allow-node-changes`)."""
    environment = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    return subprocess.Popen(
        [
            str(BIN / "gpuctl-agent"),
            "run",
            f"--coordinator=localhost:{port}",
            f"--ca-file={ca_file}",
            f"--token-file={token_file}",
            f"--host-root={host_root}",
            f"--node-name={node}",
            "--health-port=0",
            "--grpc-health-port=0",
            "--no-udev",
            f"--backoff-initial={backoff_initial:g}",
            f"--backoff-max={backoff_max:g}",
            *extra_args,
        ],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
