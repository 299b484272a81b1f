"""Read the kernel's own list of a DRM device's clients: debugfs `dri/<minor>/clients`.

The kernel keeps one `struct drm_file` per open() of any of a device's DRM nodes (card or
render) until its last reference goes (a dup'd fd, a forked child's copy, an mmap of the
node all keep it), and `drm_clients_info` in drivers/gpu/drm/drm_debugfs.c prints them, one
line each, under a header naming the columns:

    command  tgid  dev  master  a  uid  magic  [name]  [id]
    "%20s    %5d   %3d    %c    %c  %5d  %10u  [%*s]   [%20llu]"

`dev` is the minor the client opened (its card or render node number); older kernels say
`pid` for `tgid`; 6.15 added `name` (the client's chosen name, "<unset>" when none, never with
spaces) and later kernels `id` (the client id fdinfo prints as `drm-client-id`). The
command is the task's comm, which may hold spaces: rows are split from the right, by the
number of columns the header names. A header this reader does not know, or one row that does
not fit it (a comm with a newline, a minor of another device), makes the whole list
untrusted (`DebugfsFormatError`): the caller then sweeps /proc instead. Newer kernels make
`dri/<minor>` a symlink to the device's own directory (`dri/<PCI address>`); older ones
have one directory per minor. Either way `dri/<minor>/clients` lists the whole device.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from agent.hostfs import HostFiles

DEBUGFS_DRI_DIR = "sys/kernel/debug/dri"

_BASE_COLUMNS = ("command", "tgid", "dev", "master", "a", "uid", "magic")
_OLD_BASE_COLUMNS = ("command", "pid", *_BASE_COLUMNS[2:])
_KNOWN_HEADERS = {
    (*_OLD_BASE_COLUMNS,),
    (*_BASE_COLUMNS,),
    (*_BASE_COLUMNS, "name"),
    (*_BASE_COLUMNS, "name", "id"),
}
_YES_NO = frozenset({"y", "n"})
_SHOWN = 60


class DebugfsFormatError(ValueError):
    """The clients file does not look as drm_debugfs.c prints it; the message says where."""


@dataclass(frozen=True, slots=True)
class KernelClient:
    """One open DRM file of a device, as the kernel lists it."""

    # The task's comm at the time of reading; "<unknown>" when the task has gone.
    command: str
    # The opener (or the last process that made an ioctl on it, on kernels that update
    # it); 0 when that process is not visible in the reader's pid namespace.
    tgid: int
    # The minor opened: a card or render node number of this device.
    minor: int
    # The client id fdinfo calls drm-client-id; None on kernels that do not print it.
    client_id: int | None


def clients_path(minor: int) -> str:
    return f"{DEBUGFS_DRI_DIR}/{minor}/clients"


def minor_number(node: str) -> int:
    """ "card1" -> 1, "renderD129" -> 129: the minor's index, its debugfs directory name."""
    return int(node.removeprefix("renderD").removeprefix("card"))


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _number(text: str, column: str, line: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise DebugfsFormatError(f"{column} is not a number in {_shown(line)}")
    return int(text)


def parse_clients(text: str, minors: Collection[int]) -> list[KernelClient]:
    """The clients listed in one `clients` file of a device whose minors are `minors`."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise DebugfsFormatError("empty file (no header)")
    header = tuple(lines[0].split())
    if header not in _KNOWN_HEADERS:
        raise DebugfsFormatError(f"unknown header {_shown(lines[0])}")
    trailing = len(header) - 1
    has_id = header[-1] == "id"
    clients = []
    for line in lines[1:]:
        fields = line.rsplit(None, trailing)
        if len(fields) == trailing:  # an empty comm: nothing left of the numbers
            fields.insert(0, "")
        if len(fields) != trailing + 1:
            raise DebugfsFormatError(f"{len(fields)} columns, not {trailing + 1}: {_shown(line)}")
        command, tgid, minor, master, authenticated, uid, magic = fields[:7]
        if master not in _YES_NO or authenticated not in _YES_NO:
            raise DebugfsFormatError(f"master/a are not y or n in {_shown(line)}")
        _number(uid, "uid", line)
        _number(magic, "magic", line)
        client = KernelClient(
            command=command.strip(),
            tgid=_number(tgid, "tgid", line),
            minor=_number(minor, "dev", line),
            client_id=_number(fields[-1], "id", line) if has_id else None,
        )
        if client.minor not in minors:
            raise DebugfsFormatError(
                f"minor {client.minor} is not one of this device's ({sorted(minors)})"
            )
        clients.append(client)
    return clients


def read_device_clients(files: HostFiles, drm_nodes: Collection[str]) -> list[KernelClient]:
    """The clients of the device whose DRM nodes are `drm_nodes` (its card's list, else its
    render node's). Raises OSError, UnicodeDecodeError or DebugfsFormatError."""
    minors = sorted((not node.startswith("card"), minor_number(node)) for node in drm_nodes)
    if not minors:
        raise DebugfsFormatError("the device has no DRM node")
    numbers = {minor for _, minor in minors}
    return parse_clients(files.read_text(clients_path(minors[0][1])), numbers)
