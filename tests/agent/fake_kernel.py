"""A hand-written fake "kernel" behind the SysfsWriter protocol, acting on a FakeHost.

It does to the fake host root what the kernel does for each sysfs write (the facts are in
agent/sysfs_write.py's docstring): `drivers/<drv>/unbind` removes the `driver` link (and the
function's DRM nodes), `drivers/<drv>/bind` and `drivers_probe` bind, `sriov_numvfs` removes
or creates the VF functions with their `virtfnN`/`physfn` links, refusing what the kernel
refuses (EBUSY for a non-zero count over another, ERANGE past `sriov_totalvfs`, ENOENT for a
PF without driver, ENODEV for an unknown function or the wrong driver). `fail()` makes a
chosen write fail with a chosen errno; every write is recorded.
"""

from __future__ import annotations

import errno
import os

from agent.sysfs_write import DRIVERS_PROBE, PCI_DEVICES, PCI_DRIVERS
from testbed.fakehost import FakeHost


def kernel_error(code: int, relative: str) -> OSError:
    return OSError(code, os.strerror(code), relative)


class FakeKernel:
    def __init__(self, host: FakeHost, *, probe_driver: str | None = "xe") -> None:
        self.host = host
        # The driver that claims an unbound GPU on drivers_probe (None: no driver loaded).
        self.probe_driver = probe_driver
        self.writes: list[tuple[str, str]] = []
        self._failures: dict[tuple[str, str | None], int] = {}

    def fail(self, relative: str, code: int, *, text: str | None = None) -> None:
        """Fail writes to `relative` (only those of `text`, when given) with `code`."""
        self._failures[(relative, text)] = code

    # -- SysfsWriter ------------------------------------------------------------------------

    def write(self, relative: str, text: str) -> None:
        self.writes.append((relative, text))
        value = text.strip()
        for key in ((relative, value), (relative, None)):
            if key in self._failures:
                raise kernel_error(self._failures[key], relative)
        if relative == DRIVERS_PROBE:
            self._probe(value, relative)
        elif relative.startswith(PCI_DRIVERS + "/"):
            driver, _, action = relative.removeprefix(PCI_DRIVERS + "/").partition("/")
            if not self.host.real(f"{PCI_DRIVERS}/{driver}").is_dir():
                raise kernel_error(errno.ENOENT, relative)
            if action == "unbind":
                self._unbind(driver, value, relative)
            elif action == "bind":
                self._bind(driver, value, relative)
            else:
                raise kernel_error(errno.EACCES, relative)
        elif relative.startswith(PCI_DEVICES + "/") and relative.endswith("/sriov_numvfs"):
            address = relative.removeprefix(PCI_DEVICES + "/").removesuffix("/sriov_numvfs")
            self._set_numvfs(address, value, relative)
        else:
            raise kernel_error(errno.EACCES, relative)

    # -- effects ----------------------------------------------------------------------------

    def _exists(self, address: str) -> bool:
        return self.host.real(f"{PCI_DEVICES}/{address}").exists()

    def driver_of(self, address: str) -> str:
        link = self.host.real(f"{PCI_DEVICES}/{address}/driver")
        return link.readlink().name if link.is_symlink() else ""

    def _read(self, address: str, name: str) -> str:
        return self.host.real(f"{PCI_DEVICES}/{address}/{name}").read_text().strip()

    def _unbind(self, driver: str, address: str, relative: str) -> None:
        if not self._exists(address) or self.driver_of(address) != driver:
            raise kernel_error(errno.ENODEV, relative)
        directory = self.host.device_dir(address)
        drm = self.host.real(f"{directory}/drm")
        for node in sorted(drm.iterdir()) if drm.is_dir() else []:
            self.host.remove(f"dev/dri/{node.name}")
        self.host.remove(f"{directory}/drm")
        self.host.unbind(address)

    def _bind(self, driver: str, address: str, relative: str) -> None:
        if not self._exists(address) or driver != self.probe_driver:
            raise kernel_error(errno.ENODEV, relative)
        if self.driver_of(address):
            raise kernel_error(errno.EBUSY, relative)
        self.host.bind(address, driver)

    def _probe(self, address: str, relative: str) -> None:
        if not self._exists(address):
            raise kernel_error(errno.ENODEV, relative)
        if not self.driver_of(address) and self.probe_driver is not None:
            self.host.bind(address, self.probe_driver)

    def _set_numvfs(self, pf: str, value: str, relative: str) -> None:
        if not self._exists(pf):
            raise kernel_error(errno.ENOENT, relative)
        try:
            wanted = int(value, 0)
        except ValueError:
            raise kernel_error(errno.EINVAL, relative) from None
        if wanted > int(self._read(pf, "sriov_totalvfs")):
            raise kernel_error(errno.ERANGE, relative)
        current = int(self._read(pf, "sriov_numvfs"))
        if wanted == current:
            return
        pf_driver = self.driver_of(pf)
        if not pf_driver:
            raise kernel_error(errno.ENOENT, relative)
        if wanted == 0:
            self._remove_vfs(pf)
        elif current:
            raise kernel_error(errno.EBUSY, relative)
        else:
            autoprobe = self._read(pf, "sriov_drivers_autoprobe") == "1"
            self.host.add_vfs(pf, wanted, driver=pf_driver if autoprobe else None)

    def _remove_vfs(self, pf: str) -> None:
        pf_dir = self.host.device_dir(pf)
        for link in sorted(self.host.real(pf_dir).glob("virtfn*")):
            vf = link.readlink().name
            if self.driver_of(vf):
                self._unbind(self.driver_of(vf), vf, "")
            self.host.remove(f"{PCI_DEVICES}/{vf}")
            self.host.remove(self.host.device_dir(vf))
            self.host.remove(f"{pf_dir}/{link.name}")
        self.host.write(f"{pf_dir}/sriov_numvfs", "0\n")
