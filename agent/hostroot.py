"""Check that a directory can serve as the host root the agent reads the node under.

The DaemonSet mounts the host paths it reads under /host and tests point at fake trees, so
every read goes through one root. A root without `sys/` and `proc/` is refused up front with a
clear error, instead of producing a report that claims an empty node.
"""

from __future__ import annotations

from pathlib import Path


class HostRootError(Exception):
    """The host root cannot be inspected; the message says why, in words."""

    def __init__(self, host_root: Path, problem: str) -> None:
        super().__init__(f"{host_root}: {problem}")
        self.host_root = host_root
        self.problem = problem


def validate_host_root(host_root: Path) -> Path:
    """Return `host_root` if it looks like a Linux root (has `sys/` and `proc/`), else raise."""
    if not host_root.exists():
        raise HostRootError(host_root, "does not exist")
    if not host_root.is_dir():
        raise HostRootError(host_root, "is not a directory")
    missing = [name for name in ("sys", "proc") if not (host_root / name).is_dir()]
    if missing:
        raise HostRootError(
            host_root, f"not a Linux root (no {' or '.join(name + '/' for name in missing)})"
        )
    return host_root
