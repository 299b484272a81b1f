"""Fake GPU node roots for rollout tests.

`gpu_node_root` builds one Arc B580 on an out-of-tree `xe` loaded at a given version (the
backport tag in its version string, a srcversion derived from the version, no holder
module): what a module image of that version loads (`backport_version_string`,
`srcversion_of`; the rig pushes those images, and KMM's worker loads them through the
node's fake kernel, testbed/harness/kubelet). SR-IOV helpers disable and re-enable VFs the way
`sriov_numvfs` does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from testbed.fakehost import FakeHost
from testbed.fakehost.host import DEFAULT_RELEASE
from testbed.fakehost.pci import PCI_DEVICES
from testbed.fakehost.scenarios import B70_PFS, arc_b580_in_tree, two_pro_b70_with_vfs

VF_COUNT = 4
# The driver an image loads when the GPUDriver names no version (its Module's version is
# `cfg-<digest>`): one the nodes do not run before, so its srcversion differs.
UNVERSIONED = "v6.18.0.4_260601.2"


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


def gpu_node_root(root: Path, version: str, *, kernel_release: str = DEFAULT_RELEASE) -> FakeHost:
    """One Arc B580 bound to `xe` at `version`, on `kernel_release`; nothing holds it."""
    host = arc_b580_in_tree(root, kernel_release=kernel_release)
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
