"""The version of gpuctl this process runs: the installed package's, one home for the CLI,
the agent (its reports) and the coordinator (gpuctl_build_info)."""

from __future__ import annotations

import importlib.metadata

UNKNOWN_VERSION = "unknown"


def gpuctl_version() -> str:
    """The `gpuctl` distribution's version; "unknown" when run from a tree not installed."""
    try:
        return importlib.metadata.version("gpuctl")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN_VERSION
