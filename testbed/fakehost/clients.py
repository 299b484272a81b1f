"""DRM nodes, the processes that hold them open and the kernel's DRM client lists.

The part of `FakeHost` that plays who has a GPU open: `proc/<pid>/fd/<n>` symlinks to
"/dev/dri/renderD128" with DRM fdinfo, VFIO fds, forked children, and after
`enable_debugfs(style)` the kernel's client lists (`sys/kernel/debug/dri/<minor>/clients`,
in the format of drivers/gpu/drm/drm_debugfs.c), kept up to date as DRM fds are added: one
row per open DRM file, i.e. per (device, client id); dup'd fds and forked children that share
a client id share its row. Apart from the PCI functions (pci.py) because it is what the
agent's client scan reads, and grows with processes, not devices.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from testbed.fakehost.drm_text import DEBUGFS_DRI, DEBUGFS_STYLES, debugfs_clients_text, drm_fdinfo
from testbed.fakehost.files import HostRoot

DRM_MAJOR = 226
# Non-DRM fds every fake process gets first, like a real one.
_ORDINARY_FDS = ("/dev/null", "/dev/pts/0", "/dev/pts/0")


class DrmClients(HostRoot):
    """DRM nodes, processes and their fds, the kernel's client lists (see the module
    docstring); `FakeHost` sets the state below."""

    # The kernel's open DRM files: device address -> [(command, tgid, minor, client id)].
    _drm_node_device: dict[str, str]
    _kernel_clients: dict[str, list[tuple[str, int, int, int]]]
    _debugfs_style: str | None
    _next_client_id: int

    def add_drm_node(self, address: str, node: str) -> None:
        """drm/<node> under the function (with its `dev` "226:N") and dev/dri/<node>."""
        minor = int(node.removeprefix("renderD").removeprefix("card"))
        self.write(f"{self._device_dirs[address]}/drm/{node}/dev", f"{DRM_MAJOR}:{minor}\n")
        self.write(f"dev/dri/{node}", b"")
        self._drm_node_device[node] = address
        self._kernel_clients.setdefault(address, [])
        self._write_debugfs(address)

    # -- processes --------------------------------------------------------------------------

    def add_process(
        self,
        pid: int,
        command: str,
        *,
        fds: Mapping[int, str] | None = None,
        fdinfo: Mapping[int, str] | None = None,
        ordinary_fds: bool = True,
        cgroup: str | None = None,
    ) -> None:
        """proc/<pid> with comm, fd/<n> symlinks to the given targets ("/dev/dri/renderD128",
        "socket:[123]") and fdinfo/<n> files. With `ordinary_fds`, fds 0-2 are stdio.
        `cgroup`: its /proc/<pid>/cgroup text (None: no such file, its owner unknown)."""
        base = self.real(f"proc/{pid}")
        fd_dir, fdinfo_dir = base / "fd", base / "fdinfo"
        fd_dir.mkdir(parents=True, exist_ok=True)
        fdinfo_dir.mkdir(exist_ok=True)
        (base / "comm").write_text(command + "\n")
        if cgroup is not None:
            (base / "cgroup").write_text(cgroup)
        links = dict(enumerate(_ORDINARY_FDS)) if ordinary_fds else {}
        links.update(fds or {})
        # A large node has 120,000 fd links: make them relative to the open fd/ directory
        # (symlinkat), so the kernel does not walk the whole path for each.
        fd_dir_fd = os.open(fd_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for fd, target in links.items():
                os.symlink(target, str(fd), dir_fd=fd_dir_fd)
        finally:
            os.close(fd_dir_fd)
        for fd, text in (fdinfo or {}).items():
            (fdinfo_dir / str(fd)).write_text(text)

    def add_drm_fd(
        self,
        pid: int,
        fd: int,
        node: str,
        *,
        pdev: str | None,
        client_id: int | None,
        driver: str = "xe",
    ) -> None:
        """Give an existing process an fd on /dev/dri/<node> with DRM fdinfo. The kernel's
        list of the node's device gains a row for a new client id (or for every fd without
        one), naming `pid`."""
        self.symlink(f"proc/{pid}/fd/{fd}", f"/dev/dri/{node}")
        self.write(
            f"proc/{pid}/fdinfo/{fd}", drm_fdinfo(pdev=pdev, client_id=client_id, driver=driver)
        )
        address = self._drm_node_device.get(node)
        if address is None:
            return  # a node of no device this host has in sysfs
        rows = self._kernel_clients[address]
        if client_id is not None and any(row[3] == client_id for row in rows):
            return  # a dup'd fd or a forked child's: the same open file
        command = self.real(f"proc/{pid}/comm").read_text().rstrip("\n")
        minor = int(node.removeprefix("renderD").removeprefix("card"))
        self.add_kernel_client(address, command=command, tgid=pid, minor=minor, client_id=client_id)

    def add_vfio_fd(self, pid: int, fd: int, address: str, *, cdev: str | None = None) -> None:
        """Give an existing process an fd on the VFIO file of function `address`: its group
        file /dev/vfio/<group>, or with `cdev` its device file /dev/vfio/devices/<cdev>."""
        target = f"/dev/vfio/devices/{cdev}" if cdev else f"/dev/vfio/{self.iommu_group(address)}"
        self.symlink(f"proc/{pid}/fd/{fd}", target)

    def set_children(self, pid: int, children: Sequence[int]) -> None:
        """/proc/<pid>/task/<pid>/children: the processes `pid` forked."""
        self.write(f"proc/{pid}/task/{pid}/children", "".join(f"{c} " for c in children))

    def remove_process(self, pid: int) -> None:
        """The process exits; the open DRM files the kernel lists under its pid close."""
        self.remove(f"proc/{pid}")
        for address, rows in self._kernel_clients.items():
            if any(row[1] == pid for row in rows):
                rows[:] = [row for row in rows if row[1] != pid]
                self._write_debugfs(address)

    # -- debugfs ----------------------------------------------------------------------------

    def enable_debugfs(self, style: str = "id") -> None:
        """Mount debugfs: the kernel's client list of every DRM device, in `style`'s format
        (see DEBUGFS_STYLES), kept up to date from now on."""
        if style not in DEBUGFS_STYLES:
            raise ValueError(f"unknown debugfs style {style!r}")
        self._debugfs_style = style
        for address in self._kernel_clients:
            self._write_debugfs(address)

    def debugfs_clients_path(self, address: str) -> str:
        """The `clients` file the agent reads for a device (under its card's minor)."""
        return f"{DEBUGFS_DRI}/{self._first_minor(address)}/clients"

    def _minors(self, address: str) -> list[int]:
        return sorted(
            int(node.removeprefix("renderD").removeprefix("card"))
            for node, device in self._drm_node_device.items()
            if device == address
        )

    def _first_minor(self, address: str) -> int:
        return self._minors(address)[0]

    def _write_debugfs(self, address: str) -> None:
        style = self._debugfs_style
        if style is None:
            return
        text = debugfs_clients_text(style, self._kernel_clients[address])
        if style == "pid":  # old kernels: a directory per minor, each listing the device
            for minor in self._minors(address):
                self.write(f"{DEBUGFS_DRI}/{minor}/clients", text)
            return
        # Newer kernels: the device's directory, and a symlink per minor to it.
        self.write(f"{DEBUGFS_DRI}/{address}/clients", text)
        self.write(f"{DEBUGFS_DRI}/{address}/name", f"xe dev={address} unique={address}\n")
        for minor in self._minors(address):
            if not self.real(f"{DEBUGFS_DRI}/{minor}").is_symlink():
                self.symlink(f"{DEBUGFS_DRI}/{minor}", address)

    def add_kernel_client(
        self, address: str, *, command: str, tgid: int, minor: int, client_id: int | None = None
    ) -> int:
        """An open DRM file only the kernel's list shows (e.g. an fd passed on to another
        process, or a mapping kept after close). Returns its client id."""
        if client_id is None:
            client_id = self._next_client_id
            self._next_client_id += 1
        self._kernel_clients[address].append((command, tgid, minor, client_id))
        self._write_debugfs(address)
        return client_id
