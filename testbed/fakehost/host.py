"""FakeHost: a fake host root under a temporary directory, laid out like the kernel's.

`FakeHost` is its parts put together: PCI functions (pci.py), DRM nodes, processes and the
kernel's client lists (clients.py), the kernel's boot, trust and modules (kernel_state.py),
over the root's plain files (files.py). This module makes a new root a plausible host (a
kernel installed, an init process, a BIOS boot) and injects faults: faults the test host
cannot make (tests run as root, so chmod 000 is no obstacle) are made two ways at once by
`deny(path)`: on disk the entry becomes a directory where a file is expected (or a file
where a directory is expected), so any reader fails; and `files()` / `proc_syscalls()`
return hand-written readers that raise PermissionError for it (faults.py).
"""

from __future__ import annotations

import datetime
from pathlib import Path

from agent.fdscan import ProcSyscalls
from agent.hostfs import HostFiles
from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost.faults import DenyingHostFiles, denying_proc_syscalls
from testbed.fakehost.kernel_state import KernelState
from testbed.fakehost.pci import PciFunctions

DEFAULT_RELEASE = "6.8.0-60-generic"
# The clock fake hosts are inspected at.
FIXED_NOW = datetime.datetime(2026, 11, 29, 23, 0, tzinfo=datetime.UTC)


class FakeHost(PciFunctions, KernelState):
    """A fake host root under `root`: add PCI functions, modules, module files, processes."""

    def __init__(
        self, root: Path, *, kernel_release: str = DEFAULT_RELEASE, hostname: str = "gpu-node-1"
    ) -> None:
        self.root = root
        self.kernel_release = kernel_release
        self._device_dirs: dict[str, str] = {}
        self._denied: set[str] = set()
        self._dep_lines: list[str] = []
        # The kernel's open DRM files: device address -> [(command, tgid, minor, client id)].
        self._drm_node_device: dict[str, str] = {}
        self._kernel_clients: dict[str, list[tuple[str, int, int, int]]] = {}
        self._debugfs_style: str | None = None
        self._next_client_id = 1_000_000
        self._next_iommu_group = 0
        for directory in ("sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/module", "dev/dri"):
            self._mkdir(directory)
        self._mkdir(f"lib/modules/{kernel_release}")
        self.install_kernel(kernel_release)
        self.write("proc/sys/kernel/osrelease", kernel_release + "\n")
        self.write("proc/sys/kernel/hostname", hostname + "\n")
        self.write("proc/sys/kernel/tainted", "0\n")  # an untainted kernel
        # A BIOS boot, lockdown off, signatures checked but not enforced: a common default.
        self.set_lockdown("none")
        self.set_sig_enforce("N")
        self.write("proc/cmdline", f"BOOT_IMAGE=/boot/vmlinuz-{kernel_release} ro quiet\n")
        # Every Linux system has an init process; an empty proc/ means /proc is not mounted.
        self.add_process(1, "systemd")

    # -- faults -----------------------------------------------------------------------------

    def deny(self, relative: str) -> None:
        """Make an entry unreadable: PermissionError from `files()`/`proc_syscalls()`, and on
        disk a directory where a file was (or a file where a directory was)."""
        real = self.real(relative)
        was_directory = real.is_dir() and not real.is_symlink()
        self.remove(relative)
        if was_directory:
            self.write(relative, b"")
        else:
            self._mkdir(relative)
        self._denied.add(relative)

    def files(self) -> HostFiles:
        """A reader of this root that raises PermissionError for entries given to `deny`."""
        return DenyingHostFiles(self.root, frozenset(self._denied))

    def proc_syscalls(self) -> ProcSyscalls:
        """/proc system calls that raise PermissionError for entries given to `deny`."""
        return denying_proc_syscalls(self.path("proc"), frozenset(self._denied))

    def inspect(self, *, node_name: str = "gpu-node-1") -> pb.NodeReport:
        """inspect_node on this root at FIXED_NOW, with the injected faults."""
        return inspect_node(
            self.root,
            node_name=node_name,
            now=FIXED_NOW,
            files=self.files(),
            proc_syscalls=self.proc_syscalls(),
        )
