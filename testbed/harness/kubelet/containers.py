"""Running one container of a KMM Pod: a process in a mount namespace of its own.

A container sees its image's files and its volumes at their mount paths. Here that is a
``unshare --mount`` shell that bind-mounts each source onto its target and then ``exec``s the
container's command, so KMM's own commands run unchanged: the init container's ``/bin/sh -c
'mkdir -p /tmp/opt/lib/modules; cp -R /opt/lib/modules/<kernel> …'`` over the image's folder, the
worker container's ``worker kmod load /etc/kmm-worker/config.yaml`` with the node's fake
``/lib/modules``, the Pod's ``/tmp`` and the fake ``modprobe`` first on its ``PATH``.

A test's folders live under ``/tmp``, which the worker's own ``/tmp`` hides: that mount is
made last, and what the container's processes read of the kubelet's folders (the fake
``modprobe``, the node's root) they name through ``/proc/<kubelet pid>/root`` (``outside``),
which resolves in the kubelet's mount namespace. Mount points that do not exist on this
machine (``/etc/kmm-worker``, ``/host/lib/modules``) are created, empty, as a container
runtime creates them in its rootfs. Needs root (CI runs as root), as a kubelet does.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO


def outside(path: Path | str) -> str:
    """``path`` as every mount namespace of this machine sees it: through this process's root."""
    return f"/proc/{os.getpid()}/root{Path(path).resolve()}"


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = False


def _hides_a_source(mount: Mount, mounts: Sequence[Mount]) -> bool:
    target = Path(mount.target)
    return any(target in other.source.resolve().parents for other in mounts)


def mount_script(mounts: Sequence[Mount]) -> str:
    """The shell lines that make ``mounts`` and then run the container's command ("$@").
    A mount over a folder that holds other mounts' sources (``/tmp``) is made last."""
    lines = ["set -e"]
    for mount in sorted(mounts, key=lambda m: _hides_a_source(m, mounts)):
        source, target = shlex.quote(str(mount.source.resolve())), shlex.quote(mount.target)
        if mount.source.is_dir():
            lines.append(f"mkdir -p {target}")
        lines.append(f"mount --bind {source} {target}")
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    lines.append('exec "$@"')
    return "\n".join(lines)


def start(
    mounts: Sequence[Mount],
    argv: Sequence[str],
    environment: Mapping[str, str],
    log: IO[bytes],
) -> subprocess.Popen[bytes]:
    """Starts the container; its output goes to ``log``."""
    return subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            mount_script(mounts),
            "container",
            *argv,
        ],
        env=dict(environment),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
