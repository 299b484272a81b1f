"""PCI functions of a fake host root, laid out as sysfs lays them out.

`sys/bus/pci/devices/<BDF>` are relative symlinks into `sys/devices/pci0000:00/...`,
`driver` links point at `../../../bus/pci/drivers/<name>` (relative paths computed from the
real nesting), VFs have `physfn` and PFs `virtfnN`, attribute files hold what the kernel
prints ("0x8086\\n"), each function has an IOMMU group of its own. The part of `FakeHost`
that plays the devices; their DRM nodes are clients.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.fakehost.clients import DrmClients

PCI_DEVICES = "sys/bus/pci/devices"
PCI_DRIVERS = "sys/bus/pci/drivers"


class PciFunctions(DrmClients):
    """Add PCI functions and VFs, bind and unbind drivers; `FakeHost` sets the state below."""

    _next_iommu_group: int

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
