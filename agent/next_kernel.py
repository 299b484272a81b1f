"""Which kernel the node would boot next: the newest one installed.

A node that reboots into a new kernel needs a driver image for it (docs/kernel-upgrades.md),
so the agent reports the kernel it would come back with. Boot loaders on the distributions
GPU nodes run (GRUB with GRUB_DEFAULT=0 on Debian and Ubuntu, BLS entries on Fedora and RHEL)
boot the newest installed kernel by default, so that is what is reported: the highest release
among `/boot/vmlinuz-<release>` (with its `/lib/modules/<release>`: a kernel installed, not
a stray file) and `/lib/modules/<release>/vmlinuz` (where BLS distributions keep it),
compared as version strings (numbers as numbers). A pinned default
entry (grub-set-default, grubby --set-default) is not read; docs/kernel-upgrades.md says so.
Nothing readable: None, with a warning. The running kernel counts too: a node with nothing
newer reports its own release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.hostfs import HostFiles
from agent.module_files import is_directory_name
from agent.warninglog import WarningLog

_VMLINUZ = "vmlinuz-"
_PARTS = re.compile(r"(\d+)")


@dataclass(frozen=True, slots=True)
class NextKernel:
    release: str
    source: str


def version_key(release: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that orders releases as versions: "6.17.0-9" after "6.8.0-60"."""
    return tuple(
        (1, int(part)) if part.isdigit() else (0, part) for part in _PARTS.split(release) if part
    )


def read_next_kernel(files: HostFiles, running: str, log: WarningLog) -> NextKernel | None:
    found: dict[str, str] = {}
    try:
        for name in files.list_dir("boot"):
            release = name.removeprefix(_VMLINUZ)
            installed = is_directory_name(release) and files.exists(f"lib/modules/{release}")
            if name.startswith(_VMLINUZ) and installed:
                found.setdefault(release, f"/boot/{name}")
    except FileNotFoundError:
        pass
    except OSError as error:
        log.add_error("boot", error)
    try:
        for release in files.list_dir("lib/modules"):
            if is_directory_name(release) and files.exists(f"lib/modules/{release}/vmlinuz"):
                found.setdefault(release, f"/lib/modules/{release}/vmlinuz")
    except FileNotFoundError:
        pass
    except OSError as error:
        log.add_error("lib/modules", error)
    if not found:
        if running:
            log.add("boot", "no installed kernel image found: the next kernel is unknown")
        return None
    newest = max(found, key=version_key)
    return NextKernel(newest, found[newest])
