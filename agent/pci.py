"""Find the node's Intel display functions in sysfs and read what an unload depends on.

A GPU is a PCI function with vendor 0x8086 and base class 0x03 (0x0300 VGA, 0x0380
display controller); device ids alone never decide, and Intel host bridges, PCIe switch
ports and audio functions are skipped. For each GPU this reads identity, the bound driver,
SR-IOV state (PF totals, active VFs and their drivers, or a VF's parent), DRM nodes, and
whether xe holds it in survivability mode (agent/survivability.py).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from agent.hostfs import HostFiles
from agent.survivability import (
    NOT_IN_SURVIVABILITY,
    SURVIVABILITY_FILE,
    SURVIVABILITY_INFO_DIR,
    Survivability,
    parse_survivability,
    with_info,
)
from agent.sysattr import parse_hex, read_attribute, read_decimal, read_hex
from agent.warninglog import WarningLog

PCI_DEVICES_DIR = "sys/bus/pci/devices"
INTEL_VENDOR_ID = 0x8086
DISPLAY_BASE_CLASS = 0x03

_DRM_NODE = re.compile(r"^(card|renderD)(\d+)$")
_VIRTFN = re.compile(r"^virtfn(\d+)$")


class Role(enum.Enum):
    PHYSICAL = "PHYSICAL"
    VIRTUAL = "VIRTUAL"
    STANDALONE = "STANDALONE"


@dataclass(slots=True)
class VirtualFunctionLink:
    address: str
    # "" when unbound, None when the driver link could not be read.
    driver: str | None


@dataclass(slots=True)
class SriovState:
    total_vfs: int | None
    # None when `sriov_numvfs` could not be read.
    num_vfs: int | None
    drivers_autoprobe: bool
    vf_device_id: str
    vfs: list[VirtualFunctionLink] = field(default_factory=list)


@dataclass(slots=True)
class GpuFunction:
    address: str
    vendor_id: int
    device_id: int | None
    class_code: int
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    revision: int | None = None
    # "" when unbound, None when the `driver` link could not be read.
    driver: str | None = ""
    driver_override: str = ""
    numa_node: int | None = None
    boot_vga: bool = False
    role: Role = Role.STANDALONE
    physfn: str = ""
    sriov: SriovState | None = None
    # DRM node names ("card1", "renderD129"), cards first, in number order.
    drm_nodes: list[str] = field(default_factory=list)
    # xe's survivability mode; None when the device's directory could not be listed.
    survivability: Survivability | None = None

    @property
    def drm_card(self) -> str:
        return next((n for n in self.drm_nodes if n.startswith("card")), "")

    @property
    def drm_render(self) -> str:
        return next((n for n in self.drm_nodes if n.startswith("renderD")), "")


@dataclass(slots=True)
class PciScan:
    gpus: list[GpuFunction]
    # False when sys/bus/pci/devices itself could not be listed: GPUs are unknown.
    listed: bool


def is_intel_display(vendor_id: int, class_code: int) -> bool:
    """The GPU test: Intel vendor and display base class (the top byte of the class)."""
    return vendor_id == INTEL_VENDOR_ID and (class_code >> 16) == DISPLAY_BASE_CLASS


def scan_intel_gpus(files: HostFiles, log: WarningLog) -> PciScan:
    """Every Intel display function under sys/bus/pci/devices, in address order."""
    try:
        addresses = files.list_dir(PCI_DEVICES_DIR)
    except OSError as error:
        log.add_error(PCI_DEVICES_DIR, error)
        return PciScan(gpus=[], listed=False)
    gpus = []
    for address in addresses:
        base = f"{PCI_DEVICES_DIR}/{address}"
        if not files.resolves(base):
            log.add(base, "dangling symlink: the device has gone")
            continue
        vendor_id = read_hex(files, f"{base}/vendor", log)
        class_code = read_hex(files, f"{base}/class", log)
        if vendor_id is None or class_code is None:
            continue
        if is_intel_display(vendor_id, class_code):
            gpus.append(read_gpu_function(files, address, vendor_id, class_code, log))
    return PciScan(gpus=gpus, listed=True)


def read_driver_link(files: HostFiles, relative: str, log: WarningLog) -> str | None:
    """Basename of a `driver` symlink: "" when absent (unbound), None when unreadable."""
    try:
        target = files.read_link(relative)
    except FileNotFoundError:
        return ""
    except OSError as error:
        log.add_error(relative, error)
        return None
    if not files.resolves(relative):
        log.add(relative, f"dangling symlink to {target}")
        return None
    return target.rstrip("/").rsplit("/", 1)[-1]


def read_gpu_function(
    files: HostFiles, address: str, vendor_id: int, class_code: int, log: WarningLog
) -> GpuFunction:
    base = f"{PCI_DEVICES_DIR}/{address}"
    gpu = GpuFunction(
        address=address,
        vendor_id=vendor_id,
        device_id=read_hex(files, f"{base}/device", log),
        class_code=class_code,
        subsystem_vendor_id=read_hex(files, f"{base}/subsystem_vendor", log),
        subsystem_device_id=read_hex(files, f"{base}/subsystem_device", log),
        revision=read_hex(files, f"{base}/revision", log),
        driver=read_driver_link(files, f"{base}/driver", log),
        numa_node=read_decimal(files, f"{base}/numa_node", log, missing_ok=True),
    )
    override = read_attribute(files, f"{base}/driver_override", log, missing_ok=True)
    gpu.driver_override = "" if override in (None, "(null)") else override
    gpu.boot_vga = read_attribute(files, f"{base}/boot_vga", log, missing_ok=True) == "1"
    try:
        entries = files.list_dir(base)
        gpu.survivability = NOT_IN_SURVIVABILITY
    except OSError as error:
        log.add_error(base, error)
        entries = []
    if SURVIVABILITY_FILE in entries:
        text = read_attribute(files, f"{base}/{SURVIVABILITY_FILE}", log)
        gpu.survivability = parse_survivability(text)
        if SURVIVABILITY_INFO_DIR in entries:
            info = _read_group(files, f"{base}/{SURVIVABILITY_INFO_DIR}", log)
            gpu.survivability = with_info(gpu.survivability, info)
    if "physfn" in entries:
        gpu.role = Role.VIRTUAL
        gpu.physfn = _link_basename(files, f"{base}/physfn", log)
    if "sriov_totalvfs" in entries:
        gpu.sriov = _read_sriov(files, base, entries, log)
        if gpu.sriov is not None and gpu.role is not Role.VIRTUAL:
            gpu.role = Role.PHYSICAL
    gpu.drm_nodes = _read_drm_nodes(files, f"{base}/drm", log)
    return gpu


def _read_group(files: HostFiles, directory: str, log: WarningLog) -> dict[str, str | None]:
    """An attribute group's files (name -> text; None, with a warning, when unreadable)."""
    try:
        names = files.list_dir(directory)
    except OSError as error:
        log.add_error(directory, error)
        return {}
    return {name: read_attribute(files, f"{directory}/{name}", log) for name in names}


def _link_basename(files: HostFiles, relative: str, log: WarningLog) -> str:
    try:
        return files.read_link(relative).rstrip("/").rsplit("/", 1)[-1]
    except OSError as error:
        log.add_error(relative, error)
        return ""


def _read_sriov(
    files: HostFiles, base: str, entries: list[str], log: WarningLog
) -> SriovState | None:
    """SR-IOV state of a function with an SR-IOV capability; None if it offers no VFs."""
    total_vfs = read_decimal(files, f"{base}/sriov_totalvfs", log)
    num_vfs = read_decimal(files, f"{base}/sriov_numvfs", log)
    if total_vfs == 0 and not num_vfs:
        # The capability offers no VFs (xe caps it by max_vfs): not a PF. An unreadable
        # total keeps the function a PF with what could be read, so unknowns surface.
        return None
    autoprobe = read_attribute(files, f"{base}/sriov_drivers_autoprobe", log, missing_ok=True)
    vf_device = parse_hex(
        read_attribute(files, f"{base}/sriov_vf_device", log, missing_ok=True),
        f"{base}/sriov_vf_device",
        log,
    )
    vfs = []
    numbered = sorted(
        (int(m.group(1)), name) for name in entries if (m := _VIRTFN.match(name)) is not None
    )
    for _, name in numbered:
        link = f"{base}/{name}"
        vf_address = _link_basename(files, link, log)
        if vf_address:
            vfs.append(
                VirtualFunctionLink(vf_address, read_driver_link(files, f"{link}/driver", log))
            )
    return SriovState(
        total_vfs=total_vfs,
        num_vfs=num_vfs,
        drivers_autoprobe=autoprobe == "1",
        vf_device_id=f"0x{vf_device:04x}" if vf_device is not None else "",
        vfs=vfs,
    )


def _read_drm_nodes(files: HostFiles, relative: str, log: WarningLog) -> list[str]:
    try:
        names = files.list_dir(relative)
    except FileNotFoundError:
        return []
    except OSError as error:
        log.add_error(relative, error)
        return []
    nodes = [
        (m.group(1) != "card", int(m.group(2)), name)
        for name in names
        if (m := _DRM_NODE.match(name))
    ]
    return [name for _, _, name in sorted(nodes)]
