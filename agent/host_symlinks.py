"""Follow symlinks as the host would, under the host root (pure but for the link reads).

The agent reads the node through a host root (/host in its DaemonSet): a relative link
(Debian's `/etc/modules-load.d/modules.conf -> ../modules`) resolves there as on the host, but
an absolute one (`-> /usr/share/foo.conf`) would be resolved by the OS against the agent's own
root. `resolve_in_root` walks the path one component at a time, reading each link and taking
an absolute target from the host root, as the kernel's path walk does on the node.
"""

from __future__ import annotations

import errno

from agent.hostfs import HostFiles

# The kernel's limit on links followed in one path walk (MAXSYMLINKS).
MAX_LINKS = 40
# readlink(2) of something that is not a link (EINVAL), or of a name that is not there.
_NOT_A_LINK = frozenset({errno.EINVAL, errno.ENOENT, errno.ENOTDIR})


def resolve_in_root(files: HostFiles, relative: str) -> str:
    """The host-relative path `relative` leads to on the host, every link followed ("" is the
    root itself). A missing component ends the walk: the rest is taken as written. Raises
    OSError: ELOOP past MAX_LINKS links, or a link that cannot be read."""
    pending = relative.split("/")
    walked: list[str] = []
    followed = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if walked:
                walked.pop()
            continue
        candidate = "/".join([*walked, name])
        try:
            target = files.read_link(candidate)
        except OSError as error:
            if error.errno not in _NOT_A_LINK:
                raise
            walked.append(name)
            continue
        followed += 1
        if followed > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", relative)
        if target.startswith("/"):
            walked = []
        pending = target.split("/") + pending
    return "/".join(walked)
