"""`gpuctl-coordinator`'s entry point: checks that the `coordinator` extra is installed (one clear
line and exit 2 if not, never an ImportError traceback), then runs coordinator.main."""

from __future__ import annotations

from gpuctl.common.extras import require_extra


def main() -> int:
    require_extra("gpuctl-coordinator", "coordinator")
    from coordinator.main import main as run  # noqa: PLC0415 - only once the extra is there

    return run()
