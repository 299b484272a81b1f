"""The version of gpuctl this process runs: the installed package's, one home for the CLI,
the agent (its reports) and the coordinator (gpuctl_build_info); and the name gpuctl is
installed by (`pip install gpuctl-xe`).

The distribution is `gpuctl-xe`, not `gpuctl`: `gpuctl` on PyPI is an unrelated project (0.3.6,
2021), which `pip install gpuctl` would install. `gpuctl-xe` was free on PyPI on 2026-12-07
(https://pypi.org/pypi/gpuctl-xe/json: 404, as for xe-gpuctl, intel-gpuctl, gpuctl-kmm). The
import packages and the console scripts keep their names (`gpuctl`, `kubectl-gpuctl`,
`gpuctl-agent`, `gpuctl-coordinator`).
"""

from __future__ import annotations

import importlib.metadata

# pyproject.toml's project.name (tests/common/test_extras.py checks they agree).
DISTRIBUTION = "gpuctl-xe"
UNKNOWN_VERSION = "unknown"


def gpuctl_version() -> str:
    """The gpuctl distribution's version; "unknown" when run from a tree not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN_VERSION
