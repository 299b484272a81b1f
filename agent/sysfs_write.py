"""Writes to the host's sysfs: the only way the agent changes a node, behind one protocol.

The agent's opt-in actions (unbind an idle function, set `sriov_numvfs`, probe a function)
are single writes to kernel attribute files under the host root. Every write goes through a
`SysfsWriter` passed as a parameter: `HostSysfsWriter` writes the real files, tests pass a
fake "kernel" that applies the effect to a fake host. Paths are built here from validated
PCI addresses and driver names only, so a request can never steer a write elsewhere.

Kernel facts (Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/iov.c, drivers/base/bus.c):
- `drivers/<drv>/unbind` <- "<BDF>": detach; ENODEV when the function is not bound to <drv>.
- `drivers/<drv>/bind` <- "<BDF>": attach <drv>; ENODEV when it does not match the function.
- `drivers_probe` <- "<BDF>": attach whatever driver matches, as at load; ENODEV for an unknown
  function, but *success* when no driver took it: check the `driver` link afterwards.
- `devices/<PF>/sriov_numvfs` <- "<n>": writing the current count is a no-op; 0 disables all
  VFs; a non-zero count over another non-zero one is EBUSY (write 0 first); more than
  `sriov_totalvfs` is ERANGE; a PF without a driver (or one without SR-IOV support) is ENOENT.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Protocol

PCI_DEVICES = "sys/bus/pci/devices"
PCI_DRIVERS = "sys/bus/pci/drivers"
DRIVERS_PROBE = "sys/bus/pci/drivers_probe"

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_DRIVER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class SysfsWriter(Protocol):
    def write(self, relative: str, text: str) -> None:
        """Write `text` to the attribute at `relative` (under the host root) in one write();
        raise OSError as the kernel answers (EBUSY, EINVAL, ENODEV, EROFS, ...)."""


class HostSysfsWriter:
    """Writes the real attribute files under one host root. Never creates a file: an
    attribute that does not exist is FileNotFoundError, not a new file on the host."""

    def __init__(self, host_root: Path) -> None:
        self._prefix = str(host_root).rstrip("/") + "/"

    def write(self, relative: str, text: str) -> None:
        data = text.encode()
        fd = os.open(self._prefix + relative, os.O_WRONLY | os.O_CLOEXEC)
        try:
            # sysfs hands the store function one buffer per write(): never split it.
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            raise OSError(errno.EIO, f"short write ({written} of {len(data)} bytes)", relative)


class InvalidNameError(ValueError):
    """A PCI address or driver name that cannot name a sysfs entry."""


def is_pci_address(text: str) -> bool:
    """A full lower-case PCI address as sysfs names it ("0000:03:00.0")."""
    return _PCI_ADDRESS.fullmatch(text) is not None


def check_pci_address(text: str) -> str:
    if not is_pci_address(text):
        raise InvalidNameError(f"{text!r} is not a PCI address like 0000:03:00.0")
    return text


def check_driver_name(text: str) -> str:
    if _DRIVER_NAME.fullmatch(text) is None or text in (".", ".."):
        raise InvalidNameError(f"{text!r} is not a driver name")
    return text


def device_path(address: str, attribute: str = "") -> str:
    base = f"{PCI_DEVICES}/{check_pci_address(address)}"
    return f"{base}/{attribute}" if attribute else base


def numvfs_path(pf: str) -> str:
    return device_path(pf, "sriov_numvfs")


def unbind_path(driver: str) -> str:
    return f"{PCI_DRIVERS}/{check_driver_name(driver)}/unbind"


def bind_path(driver: str) -> str:
    return f"{PCI_DRIVERS}/{check_driver_name(driver)}/bind"


_HINTS = {
    errno.EROFS: "the host's /sys is mounted read-only in the agent's pod: the DaemonSet must "
    "mount it read-write at /host/sys (chart value agent.allowNodeChanges)",
    errno.EACCES: "the agent may not write sysfs (it must run as root on the host's /sys)",
    errno.EPERM: "the agent may not write sysfs (it must run as root on the host's /sys)",
    errno.EBUSY: "the kernel says it is busy",
    errno.ENOENT: "no such attribute, or the function has no driver to do it",
    errno.ENODEV: "the function is gone, or that driver is not bound to it (unbind) or does "
    "not take it (bind)",
}


def describe_write_error(error: OSError) -> str:
    """An OSError from a sysfs write in words: errno name, the kernel's text and a hint."""
    name = errno.errorcode.get(error.errno or 0, "error")
    text = error.strerror or str(error)
    hint = _HINTS.get(error.errno or 0)
    return f"{name} ({text}){': ' + hint if hint else ''}"
