"""`kubectl gpuctl ...`: kubectl runs an executable named kubectl-gpuctl found on PATH with the
rest of the line; the package installs one beside `gpuctl`, the same command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_kubectl_gpuctl_is_gpuctl() -> None:
    for program in ("gpuctl", "kubectl-gpuctl"):
        done = subprocess.run(
            [str(BIN / program), "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, (program, done.stderr)
        assert '"client"' in done.stdout
    help_text = subprocess.run(
        [str(BIN / "kubectl-gpuctl"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "support-bundle" in help_text
