"""FakeHost: build fake host roots under a temporary directory, laid out like the kernel's.

`sys/bus/pci/devices/<BDF>` are relative symlinks into `sys/devices/pci0000:00/...`,
`driver` links point at `../../../bus/pci/drivers/<name>` (relative paths computed from the
real nesting), VFs have `physfn` and PFs `virtfnN`, attribute files hold what the kernel
prints ("0x8086\\n"), `proc/<pid>/fd/<n>` are symlinks to "/dev/dri/renderD128" etc., and
`lib/modules/<release>/` holds tiny real ELF64 modules. Scenarios live in `scenarios.py`.
After `enable_debugfs(style)` the kernel's DRM client lists are there too
(`sys/kernel/debug/dri/<minor>/clients`, in the format of drivers/gpu/drm/drm_debugfs.c),
kept up to date as DRM fds are added: one row per open DRM file, i.e. per (device, client
id); dup'd fds and forked children that share a client id share its row.

Faults the test host cannot make (tests run as root, so chmod 000 is no obstacle) are made
two ways at once by `deny(path)`: on disk the entry becomes a directory where a file is
expected (or a file where a directory is expected), so any reader fails; and `files()` /
`proc_syscalls()` return hand-written readers that raise PermissionError for it.
"""

from __future__ import annotations

import datetime
import lzma
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import zstandard

from agent.fdscan import OS_SYSCALLS, ProcSyscalls
from agent.hostfs import HostFiles
from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost.elf import module_image
from testbed.fakehost.signing import SigningKey, efi_signature_lists, signed

PCI_DEVICES = "sys/bus/pci/devices"
PCI_DRIVERS = "sys/bus/pci/drivers"
DRM_MAJOR = 226
DEFAULT_RELEASE = "6.8.0-60-generic"
EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
IMAGE_SECURITY_DATABASE_GUID = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"
# The clock fake hosts are inspected at.
FIXED_NOW = datetime.datetime(2026, 11, 29, 23, 0, tzinfo=datetime.UTC)

# Non-DRM fds every fake process gets first, like a real one.
_ORDINARY_FDS = ("/dev/null", "/dev/pts/0", "/dev/pts/0")

DEBUGFS_DRI = "sys/kernel/debug/dri"
# The header of drm_clients_info by kernel: "pid" (before 6.7), "tgid", "name" (6.15), "id".
DEBUGFS_STYLES = ("pid", "tgid", "name", "id")
_CLIENT_NAME_WIDTH = 64


def debugfs_clients_text(style: str, rows: Sequence[tuple[str, int, int, int]]) -> str:
    """A `clients` file as drm_clients_info prints it; rows are (command, tgid, minor, id)."""
    pid = "pid" if style == "pid" else "tgid"
    header = f"{'command':>20} {pid:>5} {'dev':>3} master a {'uid':>5} {'magic':>10}"
    if style in ("name", "id"):
        header += f" {'name':>{_CLIENT_NAME_WIDTH}}"
    if style == "id":
        header += f" {'id':>20}"
    lines = [header]
    for command, tgid, minor, client_id in rows:
        line = f"{command:>20} {tgid:>5} {minor:>3}   n    y {0:>5} {0:>10}"
        if style in ("name", "id"):
            line += f" {'<unset>':>{_CLIENT_NAME_WIDTH}}"
        if style == "id":
            line += f" {client_id:>20}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def drm_fdinfo(*, pdev: str | None, client_id: int | None, driver: str = "xe") -> str:
    """fdinfo text of a DRM fd as the kernel prints it (omit pdev/client id: older kernels)."""
    lines = ["pos:\t0", "flags:\t02100002", "mnt_id:\t26", "ino:\t1037", f"drm-driver:\t{driver}"]
    if client_id is not None:
        lines.append(f"drm-client-id:\t{client_id}")
    if pdev is not None:
        lines.append(f"drm-pdev:\t{pdev}")
    lines += ["drm-total-system:\t0", "drm-engine-rcs:\t0 ns"]
    return "\n".join(lines) + "\n"


class FakeHost:
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

    # -- plain files ------------------------------------------------------------------------

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

    # -- PCI --------------------------------------------------------------------------------

    def device_dir(self, address: str) -> str:
        """The real sysfs directory (relative to the root) of a function added before."""
        return self._device_dirs[address]

    def add_pci_function(
        self,
        address: str,
        *,
        device: int,
        class_code: int,
        vendor: int = 0x8086,
        subsystem_vendor: int | None = None,
        subsystem_device: int = 0x0000,
        revision: int = 0x00,
        parent: str | None = None,
        driver: str | None = None,
        driver_override: str | None = None,
        numa_node: int = -1,
        boot_vga: bool | None = None,
        sriov_total_vfs: int | None = None,
        sriov_vf_device: int | None = None,
        drm: Sequence[str] = (),
    ) -> str:
        """Add a PCI function (nested under `parent`'s directory, as behind a bridge) and
        its sys/bus/pci/devices link. `boot_vga` is written for VGA-class functions only,
        as the kernel does. Returns the function's sysfs directory relative to the root."""
        domain_bus = address[:7]
        base = self._device_dirs[parent] if parent else f"sys/devices/pci{domain_bus}"
        directory = f"{base}/{address}"
        self._device_dirs[address] = directory
        self._mkdir(directory)
        attributes = {
            "vendor": f"0x{vendor:04x}",
            "device": f"0x{device:04x}",
            "class": f"0x{class_code:06x}",
            "subsystem_vendor": f"0x{vendor if subsystem_vendor is None else subsystem_vendor:04x}",
            "subsystem_device": f"0x{subsystem_device:04x}",
            "revision": f"0x{revision:02x}",
            "numa_node": str(numa_node),
            "driver_override": driver_override or "(null)",
            "enable": "1",
        }
        if class_code >> 8 == 0x0300:
            attributes["boot_vga"] = "1" if boot_vga else "0"
        if sriov_total_vfs is not None:
            attributes["sriov_totalvfs"] = str(sriov_total_vfs)
            attributes["sriov_numvfs"] = "0"
            attributes["sriov_drivers_autoprobe"] = "1"
            attributes["sriov_vf_device"] = f"{(sriov_vf_device or device):x}"
            attributes["sriov_offset"] = "1"
            attributes["sriov_stride"] = "1"
        for name, value in attributes.items():
            self.write(f"{directory}/{name}", value + "\n")
        self.link_relative(f"{PCI_DEVICES}/{address}", directory)
        self._add_iommu_group(directory)
        if driver:
            self.bind(address, driver)
        for node in drm:
            self.add_drm_node(address, node)
        return directory

    def _add_iommu_group(self, directory: str) -> None:
        """The function's `iommu_group` link: each function in a group of its own, numbered
        in the order added (an IOMMU with ACS, as SR-IOV needs)."""
        group = self._next_iommu_group
        self._next_iommu_group += 1
        self._mkdir(f"sys/kernel/iommu_groups/{group}/devices")
        self.link_relative(f"{directory}/iommu_group", f"sys/kernel/iommu_groups/{group}")

    def functions_bound_to(self, driver: str) -> list[str]:
        """The addresses of the functions bound to `driver` now."""
        directory = self.real(f"{PCI_DRIVERS}/{driver}")
        if not directory.is_dir():
            return []
        return sorted(
            entry.name for entry in directory.iterdir() if entry.is_symlink() and ":" in entry.name
        )

    def iommu_group(self, address: str) -> str:
        """The IOMMU group number of a function added before."""
        return self.real(f"{self._device_dirs[address]}/iommu_group").readlink().name

    def add_vfio_cdev(self, address: str, name: str) -> None:
        """The function's iommufd device file: sysfs `vfio-dev/<name>` (e.g. "vfio0")."""
        self._mkdir(f"{self._device_dirs[address]}/vfio-dev/{name}")

    def enter_survivability(
        self,
        address: str,
        mode: str = "Boot",
        details: Sequence[str] = (
            "Capability Info: 0x138344 - 0x1f",
            "Postcode Info: 0x138348 - 0x5",
        ),
    ) -> None:
        """xe puts the function in survivability mode: its `survivability_mode` file, as
        xe_survivability_mode.c prints it ("Survivability mode type: Boot", then details)."""
        lines = [f"Survivability mode type: {mode}", *details]
        self.set_attribute(address, "survivability_mode", "".join(f"{line}\n" for line in lines))

    # -- what the kernel accepts ------------------------------------------------------------

    def install_kernel(self, release: str, *, bls: bool = False) -> None:
        """An installed kernel: /boot/vmlinuz-<release>, or with `bls` /lib/modules/<release>/
        vmlinuz (Fedora's layout); its modules directory either way."""
        self._mkdir(f"lib/modules/{release}")
        self.write(f"lib/modules/{release}/vmlinuz" if bls else f"boot/vmlinuz-{release}", b"")

    def boot_efi(
        self,
        *,
        secure_boot: bool | None,
        shim_validation_disabled: bool | None = None,
        mok_keys: Sequence[SigningKey] = (),
        mok_list_trusted: bool = True,
        db_keys: Sequence[SigningKey] = (),
    ) -> None:
        """An EFI boot: efivarfs with BootCurrent, and the SecureBoot variable (4 attribute
        bytes, then 1 or 0) unless `secure_boot` is None (firmware without Secure Boot);
        shim's MokSBStateRT when `shim_validation_disabled` is not None, and its MokListRT
        with `mok_keys` enrolled (and a blocklisted hash, which names no key). With `mok_keys`
        and `mok_list_trusted` (shim 15.7+'s default, no MokListTrusted variable): shim's
        MokListTrustedRT, the byte 0x01, both as a runtime variable and in its MOK config table
        (/sys/firmware/efi/mok-variables/, raw data, no attribute bytes). `db_keys`: UEFI db.
        Every efivarfs file is as fs/efivarfs/file.c (efivarfs_file_read) serves it: the
        attributes as a little-endian u32 (here BOOTSERVICE|RUNTIME, 0x06), then the data."""
        efivars = "sys/firmware/efi/efivars"
        self.write(f"{efivars}/BootCurrent-{EFI_GLOBAL_GUID}", b"\x06\x00\x00\x00\x01\x00")
        if secure_boot is not None:
            value = b"\x06\x00\x00\x00" + bytes([1 if secure_boot else 0])
            self.write(f"{efivars}/SecureBoot-{EFI_GLOBAL_GUID}", value)
        if shim_validation_disabled is not None:
            value = b"\x06\x00\x00\x00" + bytes([1 if shim_validation_disabled else 0])
            self.write(f"{efivars}/MokSBStateRT-{SHIM_GUID}", value)
        if mok_keys:
            lists = efi_signature_lists(mok_keys, hashes=[bytes(32)])
            self.write(f"{efivars}/MokListRT-{SHIM_GUID}", b"\x06\x00\x00\x00" + lists)
            if mok_list_trusted:
                self.write(f"{efivars}/MokListTrustedRT-{SHIM_GUID}", b"\x06\x00\x00\x00\x01")
                self.write("sys/firmware/efi/mok-variables/MokListTrustedRT", b"\x01")
        if db_keys:
            db = efi_signature_lists(db_keys)
            self.write(f"{efivars}/db-{IMAGE_SECURITY_DATABASE_GUID}", b"\x27\x00\x00\x00" + db)

    def set_lockdown(self, mode: str | None) -> None:
        """/sys/kernel/security/lockdown with `mode` selected; None: securityfs without it
        (a kernel without the lockdown LSM)."""
        self.write("sys/kernel/security/lsm", "capability,landlock,yama,apparmor\n")
        path = "sys/kernel/security/lockdown"
        if mode is None:
            self.remove(path)
            return
        words = ("none", "integrity", "confidentiality")
        self.write(path, " ".join(f"[{w}]" if w == mode else w for w in words) + "\n")

    def set_sig_enforce(self, value: str | None) -> None:
        """module.sig_enforce ("Y", "N"); None: no such parameter (no module signing)."""
        path = "sys/module/module/parameters/sig_enforce"
        if value is None:
            self.remove(path)
        else:
            self.write(path, value + "\n")

    def set_attribute(self, address: str, name: str, text: str) -> None:
        """Overwrite one attribute file with raw text (e.g. garbage)."""
        self.write(f"{self._device_dirs[address]}/{name}", text)

    def bind(self, address: str, driver: str, *, module: str | None = None) -> None:
        """Bind a function to a driver: the `driver` link and the driver's own entries."""
        directory = self._device_dirs[address]
        driver_dir = f"{PCI_DRIVERS}/{driver}"
        if not self.real(driver_dir).is_dir():
            self._mkdir(driver_dir)
            self.link_relative(
                f"{driver_dir}/module", f"sys/module/{module or driver.replace('-', '_')}"
            )
        self.link_relative(f"{directory}/driver", driver_dir)
        self.link_relative(f"{driver_dir}/{address}", directory)

    def unbind(self, address: str) -> None:
        directory = self._device_dirs[address]
        driver = self.real(f"{directory}/driver").readlink().name
        self.remove(f"{directory}/driver")
        self.remove(f"{PCI_DRIVERS}/{driver}/{address}")

    def add_drm_node(self, address: str, node: str) -> None:
        """drm/<node> under the function (with its `dev` "226:N") and dev/dri/<node>."""
        minor = int(node.removeprefix("renderD").removeprefix("card"))
        self.write(f"{self._device_dirs[address]}/drm/{node}/dev", f"{DRM_MAJOR}:{minor}\n")
        self.write(f"dev/dri/{node}", b"")
        self._drm_node_device[node] = address
        self._kernel_clients.setdefault(address, [])
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

    def add_vfs(
        self,
        pf: str,
        count: int,
        *,
        driver: str | Sequence[str | None] | None = "xe",
        first_drm_minor: int | None = None,
        render_offset: int = 128,
    ) -> list[str]:
        """Enable `count` VFs of PF `pf`: VF functions (siblings of the PF, next function
        numbers), `physfn`/`virtfnN` links, `sriov_numvfs`. `driver` is one for all or one
        per VF; xe-bound VFs get DRM nodes numbered from `first_drm_minor` (render nodes
        `render_offset` higher: minors are unique across cards and render nodes)."""
        pf_dir = self._device_dirs[pf]
        parent = pf_dir.rsplit("/", 1)[0]
        device = int(self._read(f"{pf_dir}/sriov_vf_device"), 16)
        class_code = int(self._read(f"{pf_dir}/class"), 16)
        numa_node = int(self._read(f"{pf_dir}/numa_node"))
        drivers = [driver] * count if driver is None or isinstance(driver, str) else list(driver)
        domain_bus, _, slot_function = pf.rpartition(":")
        slot, function = (int(part, 16) for part in slot_function.split("."))
        first = slot * 8 + function + 1
        addresses = []
        for index in range(count):
            number = first + index
            address = f"{domain_bus}:{number // 8:02x}.{number % 8}"
            directory = f"{parent}/{address}"
            self._device_dirs[address] = directory
            for name, value in {
                "vendor": "0x8086",
                "device": f"0x{device:04x}",
                "class": f"0x{class_code:06x}",
                "subsystem_vendor": "0x8086",
                "subsystem_device": "0x0000",
                "revision": "0x00",
                "numa_node": str(numa_node),
                "driver_override": "(null)",
            }.items():
                self.write(f"{directory}/{name}", value + "\n")
            self.link_relative(f"{PCI_DEVICES}/{address}", directory)
            self._add_iommu_group(directory)
            self.symlink(f"{directory}/physfn", f"../{pf}")
            self.symlink(f"{pf_dir}/virtfn{index}", f"../{address}")
            vf_driver = drivers[index]
            if vf_driver:
                self.bind(address, vf_driver)
            if vf_driver == "xe" and first_drm_minor is not None:
                self.add_drm_node(address, f"card{first_drm_minor + index}")
                self.add_drm_node(address, f"renderD{render_offset + first_drm_minor + index}")
            addresses.append(address)
        self.write(f"{pf_dir}/sriov_numvfs", f"{count}\n")
        return addresses

    def _read(self, relative: str) -> str:
        return self.real(relative).read_text().strip()

    # -- modules ----------------------------------------------------------------------------

    def add_module(
        self,
        name: str,
        *,
        initstate: str = "live",
        refcnt: int = 0,
        holders: Iterable[str] = (),
        parameters: Mapping[str, str] | None = None,
        srcversion: str = "",
        version: str | None = None,
        taint: str = "",
        builtin: bool = False,
    ) -> str:
        """sys/module/<name>. A built-in module gets only parameters/ (and `version`)."""
        base = f"sys/module/{name}"
        self._mkdir(f"{base}/parameters")
        for key, value in (parameters or {}).items():
            self.write(f"{base}/parameters/{key}", value + "\n")
        if version is not None:
            self.write(f"{base}/version", version + "\n")
        if builtin:
            return base
        self.write(f"{base}/initstate", initstate + "\n")
        self.write(f"{base}/refcnt", f"{refcnt}\n")
        self.write(f"{base}/taint", taint + "\n")
        self._mkdir(f"{base}/holders")
        for holder in holders:
            self.symlink(f"{base}/holders/{holder}", f"../../{holder}")
        if srcversion:
            self.write(f"{base}/srcversion", srcversion + "\n")
        self._mkdir(f"{base}/sections")
        self.write(f"{base}/coresize", "4194304\n")
        return base

    def add_module_file(
        self,
        relative: str,
        modinfo: Mapping[str, str | Sequence[str]],
        *,
        compression: str | None = None,
        in_modules_dep: bool = True,
        signed_by: SigningKey | None = None,
    ) -> str:
        """A module file at lib/modules/<release>/<relative> (".zst"/".xz" appended when
        compressed) listed in modules.dep, signed by `signed_by` as sign-file signs. Returns
        its host path ("/lib/modules/...")."""
        image = module_image(modinfo)
        if signed_by is not None:
            image = signed(image, signed_by)
        if compression == "zst":
            relative, data = relative + ".zst", zstandard.ZstdCompressor().compress(image)
        elif compression == "xz":
            relative, data = relative + ".xz", lzma.compress(image, format=lzma.FORMAT_XZ)
        elif compression is None:
            data = image
        else:
            raise ValueError(f"unknown compression {compression!r}")
        base = f"lib/modules/{self.kernel_release}"
        self.write(f"{base}/{relative}", data)
        if in_modules_dep:
            self._dep_lines.append(f"{relative}:\n")
            self.write(f"{base}/modules.dep", "".join(self._dep_lines))
        return f"/{base}/{relative}"

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


def _canonical(path: str) -> str:
    """`path` with every directory symlink above its last component resolved, so a fault
    given by the real sysfs path also hits reads through sys/bus/pci/devices links."""
    head, _, name = path.rstrip("/").rpartition("/")
    return str(Path(head).resolve() / name)


class DenyingHostFiles(HostFiles):
    """HostFiles that refuse (PermissionError) the given paths and everything under them."""

    def __init__(self, host_root: Path, denied: frozenset[str]) -> None:
        super().__init__(host_root)
        self.denied = frozenset(_canonical(self.path(d)) for d in denied)

    def _check(self, relative: str) -> None:
        if not self.denied:
            return
        real = _canonical(self.path(relative))
        if any(real == d or real.startswith(d + "/") for d in self.denied):
            raise PermissionError(13, "Permission denied", self.path(relative))

    def read_bytes(self, relative: str) -> bytes:
        self._check(relative)
        return super().read_bytes(relative)

    def read_link(self, relative: str) -> str:
        self._check(relative)
        return super().read_link(relative)

    def list_dir(self, relative: str) -> list[str]:
        self._check(relative)
        return super().list_dir(relative)


class HostFilesWithoutDebugfs(HostFiles):
    """HostFiles of a node where debugfs is not mounted under the host root (as in a pod
    whose host mount does not show it): its paths are not found."""

    def _check(self, relative: str) -> None:
        if relative.startswith("sys/kernel/debug/"):
            raise FileNotFoundError(2, "No such file or directory", self.path(relative))

    def read_bytes(self, relative: str) -> bytes:
        self._check(relative)
        return super().read_bytes(relative)

    def list_dir(self, relative: str) -> list[str]:
        self._check(relative)
        return super().list_dir(relative)


def denying_proc_syscalls(proc_dir: str, denied: frozenset[str]) -> ProcSyscalls:
    """Real /proc system calls, except that opening a denied "proc/<pid>/fd" raises
    PermissionError, as it does for an agent without hostPID/CAP_SYS_PTRACE."""
    denied_fd_dirs = {d.removeprefix("proc/") for d in denied if d.startswith("proc/")}

    def open_dir(path: str, dir_fd: int | None) -> int:
        if dir_fd is not None and path in denied_fd_dirs:
            raise PermissionError(13, "Permission denied", f"{proc_dir}/{path}")
        return OS_SYSCALLS.open_dir(path, dir_fd)

    return ProcSyscalls(
        open_dir=open_dir,
        list_dir=OS_SYSCALLS.list_dir,
        read_link=OS_SYSCALLS.read_link,
        close=OS_SYSCALLS.close,
    )
