"""Read files, links and directories of the inspected node, relative to its host root.

Every read of `sys/`, `proc/`, `boot/`, `lib/modules/` and the module configuration
directories (agent/host_paths.py) goes through a `HostFiles`, so the root is a parameter,
never a global, and tests can pass a hand-written subclass that fails chosen reads (e.g. with
PermissionError, which cannot be simulated with chmod when the tests run as root). Paths are
POSIX strings relative to the host root ("sys/module/xe"). Reads are plain `os` calls on path
strings: an inspection makes thousands of them (a large node: ~8,000 sysfs reads), and
building a `pathlib.Path` for each cost more than the reads.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# Errors that mean "no such entry" (as pathlib's exists()/is_dir() treat them); any other
# error (EACCES...) propagates: unknown must not read as absent.
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_CHUNK = 1 << 20
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _checked(path: str) -> str:
    """`path`, or OSError(EINVAL) when it holds a NUL byte (a name read from the node, such as
    a kernel release, can; the os module would raise ValueError, which no reader expects)."""
    if "\0" in path:
        raise OSError(errno.EINVAL, "path contains a NUL byte", path.replace("\0", "\\0"))
    return path


def _mode(path: str, *, follow: bool) -> int | None:
    """The file mode, or None when there is no such entry."""
    _checked(path)
    try:
        return os.stat(path, follow_symlinks=follow).st_mode  # noqa: PTH116 (speed, see above)
    except OSError as error:
        if error.errno in _ABSENT:
            return None
        raise


class HostFiles:
    """Plain OS reads under one host root; methods raise OSError like the os module does."""

    def __init__(self, host_root: Path) -> None:
        self.host_root = host_root
        self._prefix = str(host_root).rstrip("/") + "/"

    def path(self, relative: str) -> str:
        """The real path of `relative` on this machine."""
        return self._prefix + relative

    def read_bytes(self, relative: str) -> bytes:
        fd = os.open(_checked(self._prefix + relative), _READ_FLAGS)
        try:
            chunks = []
            while chunk := os.read(fd, _CHUNK):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks)

    def read_text(self, relative: str) -> str:
        """The file's content decoded as UTF-8; UnicodeDecodeError for garbage bytes."""
        return self.read_bytes(relative).decode()

    def read_link(self, relative: str) -> str:
        """The symlink's target as stored (not resolved)."""
        return os.readlink(_checked(self._prefix + relative))  # noqa: PTH115 (speed, see above)

    def list_dir(self, relative: str) -> list[str]:
        """Entry names of a directory, sorted for a stable report."""
        return sorted(os.listdir(_checked(self._prefix + relative)))  # noqa: PTH208 (speed)

    def exists(self, relative: str) -> bool:
        """True when the entry exists (a dangling symlink counts as existing)."""
        return _mode(self._prefix + relative, follow=False) is not None

    def is_dir(self, relative: str) -> bool:
        mode = _mode(self._prefix + relative, follow=True)
        return mode is not None and stat.S_ISDIR(mode)

    def resolves(self, relative: str) -> bool:
        """True when the path, following symlinks, leads to something that exists."""
        return _mode(self._prefix + relative, follow=True) is not None
