"""Read files, links and directories of the inspected node, relative to its host root.

Every read of `sys/`, `proc/`, `dev/` and `lib/modules/` goes through a `HostFiles`, so
the root is a parameter, never a global, and tests can pass a hand-written subclass that
fails chosen reads (e.g. with PermissionError, which cannot be simulated with chmod when the
tests run as root). Paths are POSIX strings relative to the host root ("sys/module/xe").
"""

from __future__ import annotations

from pathlib import Path


class HostFiles:
    """Plain OS reads under one host root; methods raise OSError like the os module does."""

    def __init__(self, host_root: Path) -> None:
        self.host_root = host_root
        self._prefix = str(host_root).rstrip("/") + "/"

    def path(self, relative: str) -> str:
        """The real path of `relative` on this machine."""
        return self._prefix + relative

    def _real(self, relative: str) -> Path:
        return Path(self._prefix + relative)

    def read_bytes(self, relative: str) -> bytes:
        return self._real(relative).read_bytes()

    def read_text(self, relative: str) -> str:
        """The file's content decoded as UTF-8; UnicodeDecodeError for garbage bytes."""
        return self.read_bytes(relative).decode()

    def read_link(self, relative: str) -> str:
        """The symlink's target as stored (not resolved)."""
        return str(self._real(relative).readlink())

    def list_dir(self, relative: str) -> list[str]:
        """Entry names of a directory, sorted for a stable report."""
        return sorted(entry.name for entry in self._real(relative).iterdir())

    def exists(self, relative: str) -> bool:
        """True when the entry exists (a dangling symlink counts as existing)."""
        real = self._real(relative)
        return real.is_symlink() or real.exists()

    def is_dir(self, relative: str) -> bool:
        return self._real(relative).is_dir()

    def resolves(self, relative: str) -> bool:
        """True when the path, following symlinks, leads to something that exists."""
        return self._real(relative).exists()
