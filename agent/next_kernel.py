"""Which kernel the node would boot next: GRUB's pinned entry, else the newest one installed.

A node that reboots into a new kernel needs a driver image for it (docs/kernel-upgrades.md),
so the agent reports the kernel it would come back with. The installed kernels are
`/boot/vmlinuz-<release>` (with its `/lib/modules/<release>`: a kernel installed, not a stray
file) and `/lib/modules/<release>/vmlinuz` (where BLS distributions keep it). Which of them:

- GRUB's one-time entry, `next_entry` in grubenv (`grub-reboot`), wins: GRUB's own config
  boots it whatever GRUB_DEFAULT says.
- Else a pinned default: `saved_entry` in grubenv where /etc/default/grub says
  GRUB_DEFAULT=saved (grub-set-default, and grubby --set-default on Fedora and RHEL, where
  it is the default), or GRUB_DEFAULT naming an entry itself. GRUB_DEFAULT is the last one
  set as Debian's grub-mkconfig sources them: /etc/default/grub, then each
  /etc/default/grub.d/*.cfg in name order.
- Else the newest installed (GRUB_DEFAULT=0 on Debian and Ubuntu lists the newest first; BLS
  sorts entries by version), compared as version strings (numbers as numbers).

An entry names its kernel in its title or id ("Advanced options for Ubuntu>Ubuntu, with
Linux 6.8.0-60-generic", "gnulinux-6.8.0-60-generic-advanced-<uuid>") or, for a BLS id, in
`/boot/loader/entries/<id>.conf`'s `linux` line: the longest installed release it contains
is the one. An entry naming no installed kernel (a menu index, a removed kernel) falls back
to the newest, with a warning saying so. grubenv lives in /boot/grub (Debian) or
/boot/grub2 (Fedora). systemd-boot's default (loader.conf, LoaderEntryDefault) is not read.
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
GRUBENV = ("boot/grub/grubenv", "boot/grub2/grubenv")
DEFAULT_GRUB = "etc/default/grub"
DEFAULT_GRUB_D = "etc/default/grub.d"
BLS_ENTRIES = "boot/loader/entries"


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
    pinned = _pinned_entry(files, log)
    if pinned is not None:
        setting, entry = pinned
        booted = _release_of(files, entry, found)
        if booted is not None:
            return NextKernel(booted, f"{found[booted]} ({setting})")
        log.add(setting.split()[0].lstrip("/"), f"{setting} {entry!r} names no installed kernel")
    newest = max(found, key=version_key)
    return NextKernel(newest, found[newest])


def _settings(text: str) -> dict[str, str]:
    """KEY=value lines (grubenv, /etc/default/grub), quotes taken off."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip().strip("\"'")
    return out


def _read_settings(files: HostFiles, relative: str, log: WarningLog) -> dict[str, str]:
    try:
        return _settings(files.read_text(relative))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(relative, error)
        return {}


def _pinned_entry(files: HostFiles, log: WarningLog) -> tuple[str, str] | None:
    """(where it is set, the entry) of GRUB's next boot when an entry is named."""
    for relative in GRUBENV:
        env = _read_settings(files, relative, log)
        if env.get("next_entry"):
            return f"/{relative} next_entry", env["next_entry"]
        where, default = _grub_default(files, log)
        if default == "saved" and env.get("saved_entry"):
            return f"/{relative} saved_entry", env["saved_entry"]
        if default not in ("saved", "") and not default.isdigit():
            return f"/{where} GRUB_DEFAULT", default
        if env:
            return None
    return None


def _grub_default(files: HostFiles, log: WarningLog) -> tuple[str, str]:
    """(the file that sets it, GRUB_DEFAULT): the last assignment of /etc/default/grub and
    its grub.d/*.cfg, sourced in that order; "0" where none sets it."""
    found = (DEFAULT_GRUB, "0")
    try:
        names = [n for n in files.list_dir(DEFAULT_GRUB_D) if n.endswith(".cfg")]
    except (FileNotFoundError, NotADirectoryError):
        names = []
    except OSError as error:
        log.add_error(DEFAULT_GRUB_D, error)
        names = []
    for relative in [DEFAULT_GRUB, *(f"{DEFAULT_GRUB_D}/{n}" for n in names if n[0] != ".")]:
        value = _read_settings(files, relative, log).get("GRUB_DEFAULT")
        if value is not None:
            found = (relative, value)
    return found


def _release_of(files: HostFiles, entry: str, found: dict[str, str]) -> str | None:
    """The installed release an entry boots: the longest named in it, or in its BLS file."""
    named = [release for release in found if release in entry]
    if not named and is_directory_name(entry.rsplit(">", 1)[-1]):
        try:
            text = files.read_text(f"{BLS_ENTRIES}/{entry.rsplit('>', 1)[-1]}.conf")
        except (OSError, UnicodeDecodeError):
            text = ""
        linux = [line.split()[-1] for line in text.splitlines() if line.startswith("linux ")]
        named = [release for release in found if any(release in path for path in linux)]
    return max(named, key=len) if named else None
