"""The plain files of a fake host root: write, link and remove under it, relative to it.

The base of every part of `FakeHost` (pci.py, clients.py, kernel_state.py build on it): one
place that turns a root-relative path ("sys/bus/pci/devices/...") into a real one. It also
keeps where each PCI function added lives in sysfs (`device_dir`, `iommu_group`), which the
PCI, DRM and VFIO parts all look up.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class HostRoot:
    """A folder laid out as a host's root; `FakeHost` sets `root` and `_device_dirs`."""

    root: Path
    # A PCI function's address -> its real sysfs directory, relative to the root.
    _device_dirs: dict[str, str]

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def real(self, relative: str) -> Path:
        return Path(self.path(relative))

    def _mkdir(self, relative: str) -> None:
        self.real(relative).mkdir(parents=True, exist_ok=True)

    def write(self, relative: str, content: str | bytes) -> None:
        """Write a file, creating its directory."""
        real = self.real(relative)
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_bytes(content.encode() if isinstance(content, str) else content)

    def symlink(self, relative: str, target: str) -> None:
        """Make `relative` a symlink to `target` (replacing what was there)."""
        real = self.real(relative)
        if real.is_symlink() or real.exists():
            real.unlink()
        real.symlink_to(target)

    def link_relative(self, relative: str, to_relative: str) -> None:
        """A symlink from `relative` to `to_relative`, as a relative path, like sysfs's."""
        start = self.real(relative).parent
        self.symlink(relative, os.path.relpath(self.path(to_relative), start))

    def remove(self, relative: str) -> None:
        real = self.real(relative)
        if real.is_dir() and not real.is_symlink():
            shutil.rmtree(real)
        elif real.is_symlink() or real.exists():
            real.unlink()

    def _read(self, relative: str) -> str:
        return self.real(relative).read_text().strip()

    def device_dir(self, address: str) -> str:
        """The real sysfs directory (relative to the root) of a function added before."""
        return self._device_dirs[address]

    def iommu_group(self, address: str) -> str:
        """The IOMMU group number of a function added before."""
        return self.real(f"{self._device_dirs[address]}/iommu_group").readlink().name
