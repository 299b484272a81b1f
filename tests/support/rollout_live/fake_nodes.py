"""Fake GPU node roots for rollout tests, and a fake KMM loader that changes them.

`gpu_node_root` builds one Arc B580 on an out-of-tree `xe` loaded at a given version (the
backport tag in its version string, a srcversion derived from the version, no holder
module). `FakeKmmLoader` is the KMM emulator's load hook: when the emulator unloads the
module from a node it checks the host is idle (no process holding a DRM node, no VFs
enabled), recording every violation, then removes `sys/module/xe` and unbinds the
functions; when it loads a version it writes the module back with the driver that version
names (the user's version inside the Module's KMM version) and binds the functions again,
as the new driver's probe would (unless the test made that version's probe fail there).
`busy_of` is the emulator's busy predicate over a host.
SR-IOV helpers disable and re-enable VFs the way `sriov_numvfs` does.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakehost import DEFAULT_RELEASE, PCI_DEVICES, FakeHost
from tests.fakehost.scenarios import B70_PFS, B580, arc_b580_in_tree, two_pro_b70_with_vfs
from tests.harness.kmm_model import Loaded
from tests.harness.kmm_safety import Busy

VF_COUNT = 4
# The driver an image loads when the GPUDriver names no version (its Module's version is
# `cfg-<digest>`): one the nodes do not run before, so its srcversion differs.
UNVERSIONED = "v6.18.0.4_260601.2"


def driver_version(kmm_version: str) -> str:
    """The driver a Module version loads: the user's version inside `<version>-<8 hex>`
    (coordinator.drivers.module_spec.kmm_version), UNVERSIONED for `cfg-<hex>` or none."""
    if not kmm_version or kmm_version.startswith("cfg-"):
        return UNVERSIONED
    match = re.fullmatch(r"(.+)-[0-9a-f]{8}", kmm_version)
    return match.group(1) if match else kmm_version


def srcversion_of(version: str) -> str:
    return hashlib.sha256(version.encode()).hexdigest()[:23].upper()


def backport_version_string(version: str) -> str:
    return (
        f"backported from  (65d3cdda6) using backports xeb_{version} for {DEFAULT_RELEASE} Kernel "
    )


def load_module(host: FakeHost, version: str) -> None:
    """`xe` live at `version`, as the out-of-tree backport KMM loads from its image."""
    host.remove("sys/module/xe")
    host.add_module(
        "xe",
        refcnt=0,
        srcversion=srcversion_of(version),
        version=backport_version_string(version),
        taint="OE",
        parameters={"force_probe": "", "max_vfs": "12"},
    )


def gpu_node_root(root: Path, version: str) -> FakeHost:
    """One Arc B580 bound to `xe` at `version`; nothing holds it."""
    host = arc_b580_in_tree(root)
    load_module(host, version)
    return host


def vf_node_root(root: Path, version: str, vf_driver: str) -> FakeHost:
    """Two Pro B70 with 4 VFs each bound to `vf_driver`, `xe` at `version`."""
    host = two_pro_b70_with_vfs(root, vf_driver=vf_driver)
    load_module(host, version)
    return host


def vf_node_root_before_vfs(root: Path, version: str) -> FakeHost:
    """`vf_node_root`'s two Pro B70 before their VFs are enabled: VFs exist only once the PF
    driver is loaded, so a test enables them (`enable_vm_vfs`, `enable_vfs`) after KMM's load."""
    host = vf_node_root(root, version, "xe")
    for pf in B70_PFS:
        disable_vfs(host, pf)
    return host


def enable_vm_vfs(host: FakeHost) -> None:
    """4 VFs per PF handed to a VM: bound to vfio-pci, which the VM holds open."""
    for pf in B70_PFS:
        host.add_vfs(pf, VF_COUNT, driver="vfio-pci")
    host.add_module("vfio_pci", refcnt=8)


def vf_addresses(host: FakeHost, pf: str) -> list[str]:
    pf_dir = host.real(host.device_dir(pf))
    links = sorted(pf_dir.glob("virtfn*"), key=lambda p: int(p.name.removeprefix("virtfn")))
    return [link.readlink().name for link in links]


def disable_vfs(host: FakeHost, pf: str) -> int:
    """sriov_numvfs=0: the VFs vanish; returns how many there were."""
    addresses = vf_addresses(host, pf)
    pf_dir = host.device_dir(pf)
    for index, address in enumerate(addresses):
        vf_dir = f"{pf_dir.rsplit('/', 1)[0]}/{address}"
        driver = host.real(f"{vf_dir}/driver")
        if driver.is_symlink():
            host.unbind(address)
        host.remove(vf_dir)
        host.remove(f"{PCI_DEVICES}/{address}")
        host.remove(f"{pf_dir}/virtfn{index}")
    host.set_attribute(pf, "sriov_numvfs", "0\n")
    return len(addresses)


def enable_vfs(host: FakeHost, pf: str, count: int) -> None:
    """sriov_numvfs=count: the VFs appear, bound to xe (autoprobe)."""
    first_minor = 1 + 5 * B70_PFS.index(pf) if pf in B70_PFS else None
    host.add_vfs(pf, count, driver="xe", first_drm_minor=first_minor)


def module_held(host: FakeHost) -> bool:
    """xe's refcount is above zero (a holder module, an open device): `modprobe -r` fails."""
    refcnt = host.real("sys/module/xe/refcnt")
    return refcnt.exists() and refcnt.read_text().strip() not in ("", "0")


def busy_of(host: FakeHost) -> Busy | None:
    """The KMM emulator's view of the host: busy (and held) or not."""
    reasons = busy_reasons(host)
    held = module_held(host)
    if held:
        reasons.append("xe's refcount is held")
    return Busy("; ".join(reasons), held=held) if reasons else None


def busy_reasons(host: FakeHost) -> list[str]:
    """Why unloading xe on this host now would hurt (what the real unload would hit)."""
    reasons = []
    proc = host.real("proc")
    for fd_dir in proc.glob("*/fd"):
        for fd in fd_dir.iterdir():
            if fd.is_symlink() and str(fd.readlink()).startswith("/dev/dri/"):
                reasons.append(f"pid {fd_dir.parent.name} holds {fd.readlink()}")
    for pf in (B580, *B70_PFS):
        numvfs = host.real(f"{PCI_DEVICES}/{pf}/sriov_numvfs")
        if numvfs.exists() and numvfs.read_text().strip() not in ("", "0"):
            reasons.append(f"{pf} has {numvfs.read_text().strip()} VFs enabled")
    return reasons


@dataclass
class FakeKmmLoader:
    """The KMM emulator's load hook over the nodes' fake roots (register with on_change)."""

    hosts: dict[str, FakeHost]
    violations: list[str] = field(default_factory=list)
    loads: list[tuple[str, str]] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    # node -> the user's version whose probe fails there: it loads, but binds no function
    # (a GPU function missing after the load: verification fails).
    probe_fails: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, _module: str, node: str, loaded: Loaded | None) -> None:
        host = self.hosts.get(node)
        if host is None:
            return
        with self._lock:
            bound = [a for a in (B580, *B70_PFS) if (host.real(f"{PCI_DEVICES}/{a}")).exists()]
            if loaded is None:
                self.unloads.append(node)
                busy = busy_reasons(host)
                if busy:
                    self.violations.append(f"{node}: unloaded while busy: {busy}")
                for address in bound:
                    if host.real(f"{PCI_DEVICES}/{address}/driver").is_symlink():
                        host.unbind(address)
                host.remove("sys/module/xe")
                return
            version = driver_version(loaded.version)
            load_module(host, version)
            probed = self.probe_fails.get(node) != version
            for address in bound if probed else ():
                if not host.real(f"{PCI_DEVICES}/{address}/driver").is_symlink():
                    host.bind(address, "xe")
            self.loads.append((node, loaded.version))
