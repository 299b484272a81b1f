"""Run the agent's inspection of this machine and return its NodeReport.

The CLI may not import the agent package (the two share only `gpuctl.api`), so a local
inspection runs `python -m agent inspect` in a child process and reads the serialized
`NodeReport` from its stdout: the same wire message the agent sends to the coordinator.
It also keeps a crash inside the inspection from taking the CLI down with a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf.message import DecodeError

from gpuctl.api.v1alpha1 import node_report_pb2 as pb

# The agent exits with this code when the host root is not usable (missing, not Linux).
BAD_HOST_ROOT_EXIT = 2


class LocalInspectionError(Exception):
    """The local inspection could not produce a report; `exit_code` is what the CLI returns."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def inspect_locally(
    host_root: Path, node_name: str | None = None, python: str = sys.executable
) -> pb.NodeReport:
    argv = [python, "-m", "agent", "inspect", "--host-root", str(host_root)]
    if node_name:
        argv += ["--node-name", node_name]
    try:
        done = subprocess.run(argv, capture_output=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise LocalInspectionError(f"could not run the agent's inspection: {err}", 1) from err
    stderr = done.stderr.decode(errors="replace").strip()
    if done.returncode == BAD_HOST_ROOT_EXIT:
        problem = stderr.splitlines()[-1].removeprefix("gpuctl-agent: ") if stderr else "unusable"
        raise LocalInspectionError(f"host root {problem}", BAD_HOST_ROOT_EXIT)
    if done.returncode != 0:
        detail = stderr.splitlines()[-1] if stderr else f"exit code {done.returncode}"
        raise LocalInspectionError(f"the agent's inspection failed: {detail}", 1)
    report = pb.NodeReport()
    try:
        report.ParseFromString(done.stdout)
    except DecodeError as err:
        raise LocalInspectionError(
            f"the agent printed something that is not a NodeReport: {err}", 1
        ) from err
    return report
