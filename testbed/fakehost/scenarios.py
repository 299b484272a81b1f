"""One builder per node layout in ../shared/fixtures.md (1-14).

fixtures.md is not in the repository: it lives in ../shared/ beside it. Each function builds a
fake host root under `root` and returns its FakeHost (so a test can add to it, or call
`files()`/`proc_syscalls()` for injected faults). `SCENARIOS` maps the fixtures.md number to
its builder. The constants name the facts tests assert on. The large synthetic node the
benchmarks inspect is testbed/fakehost/large_node.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.fakehost import FakeHost
from testbed.fakehost.host import DEFAULT_RELEASE
from testbed.fakehost.signing import SigningKey, signing_key

HOST_BRIDGE = "0000:00:00.0"
B580 = "0000:03:00.0"
B580_AUDIO = "0000:04:00.0"
B580_SWITCH_PORTS = ("0000:01:00.0", "0000:02:01.0", "0000:02:02.0")
ROOT_PORT = "0000:00:01.0"
B70_PFS = ("0000:03:00.0", "0000:83:00.0")
IGPU = "0000:00:02.0"

IN_TREE_SRCVERSION = "8A1C2F3E4D5B6A7980C1D2E"
BACKPORT_SRCVERSION = "F00DFACE0123456789ABCDE"
BACKPORT_TAG = "xeb_v6.17.13.62_260409.8"
BACKPORT_VERSION = (
    f"backported from  (65d3cdda6) using backports {BACKPORT_TAG} for {DEFAULT_RELEASE} Kernel "
)
IN_TREE_XE_FILE = f"/lib/modules/{DEFAULT_RELEASE}/kernel/drivers/gpu/drm/xe/xe.ko.zst"
DKMS_XE_FILE = f"/lib/modules/{DEFAULT_RELEASE}/updates/dkms/xe.ko.zst"


# -- building blocks ----------------------------------------------------------------------


def add_host_bridge(host: FakeHost) -> None:
    host.add_pci_function(HOST_BRIDGE, device=0x0D57, class_code=0x060000)


def _battlemage_card(
    host: FakeHost,
    address: str = B580,
    *,
    device: int = 0xE20B,
    driver: str | None = "xe",
    drm: tuple[str, ...] = ("card0", "renderD128"),
    numa_node: int = 0,
) -> None:
    """A discrete card as the kernel shows it: root port, the card's two-level PCIe switch
    (Intel 0x0604 ports), the GPU and its HD audio function (0x0403)."""
    bus = int(address[5:7], 16)
    prefix = address[:5]
    root_port = f"0000:00:{bus - 2:02x}.0" if bus > 2 else ROOT_PORT
    upstream, downstream, audio_port = (
        f"{prefix}{bus - 2:02x}:00.0",
        f"{prefix}{bus - 1:02x}:01.0",
        f"{prefix}{bus - 1:02x}:02.0",
    )
    host.add_pci_function(root_port, device=0xA70D, class_code=0x060400, driver="pcieport")
    host.add_pci_function(
        upstream, device=0xE2FF, class_code=0x060400, parent=root_port, driver="pcieport"
    )
    for port in (downstream, audio_port):
        host.add_pci_function(
            port, device=0xE2F0, class_code=0x060400, parent=upstream, driver="pcieport"
        )
    host.add_pci_function(
        address,
        device=device,
        class_code=0x030000,
        subsystem_vendor=0x8086,
        subsystem_device=0x1100,
        parent=downstream,
        driver=driver,
        numa_node=numa_node,
        boot_vga=False,
        drm=drm if driver in ("xe", "i915") else (),
    )
    host.add_pci_function(
        f"{prefix}{bus + 1:02x}:00.0",
        device=0xE2F7,
        class_code=0x040300,
        parent=audio_port,
        driver="snd_hda_intel",
        numa_node=numa_node,
    )


def in_tree_xe(
    host: FakeHost,
    *,
    refcnt: int = 0,
    holders: tuple[str, ...] = (),
    initstate: str = "live",
    parameters: dict[str, str] | None = None,
) -> None:
    host.add_module(
        "xe",
        initstate=initstate,
        refcnt=refcnt,
        holders=holders,
        srcversion=IN_TREE_SRCVERSION,
        parameters={"force_probe": "", "max_vfs": "4294967295", **(parameters or {})},
    )
    host.add_module_file(
        "kernel/drivers/gpu/drm/xe/xe.ko",
        {
            "license": "GPL and additional rights",
            "intree": "Y",
            "name": "xe",
            "srcversion": IN_TREE_SRCVERSION,
            "vermagic": f"{host.kernel_release} SMP preempt mod_unload modversions",
            "alias": ["pci:v00008086d0000E20Bsv*sd*bc03sc*i*", "pci:v00008086d0000E223sv*sd*bc*"],
        },
        compression="zst",
    )


def _backport_xe(
    host: FakeHost,
    *,
    file_on_host: bool,
    refcnt: int = 1,
    signed_by: SigningKey | None = None,
) -> None:
    """The out-of-tree backport: taint OE, backport version, held by xe_compat. With
    `file_on_host` it is a DKMS install under updates/dkms; without, KMM loaded it from its
    container. The kernel's own xe.ko (another srcversion) is on the host either way. With
    `signed_by`, the backport is signed with that key and the kernel trusted it (taint O)."""
    host.add_module(
        "xe",
        refcnt=refcnt,
        holders=("xe_compat",),
        srcversion=BACKPORT_SRCVERSION,
        version=BACKPORT_VERSION,
        taint="O" if signed_by else "OE",
        parameters={"force_probe": "", "max_vfs": "4294967295"},
    )
    host.add_module("xe_compat", refcnt=0, taint="OE", version=BACKPORT_VERSION)
    host.add_module_file(
        "kernel/drivers/gpu/drm/xe/xe.ko",
        {"intree": "Y", "name": "xe", "srcversion": IN_TREE_SRCVERSION},
        compression="zst",
    )
    if file_on_host:
        host.add_module_file(
            "updates/dkms/xe.ko",
            {
                "version": BACKPORT_VERSION,
                "name": "xe",
                "srcversion": BACKPORT_SRCVERSION,
                "depends": "xe_compat,drm_gpuvm",
            },
            compression="zst",
            signed_by=signed_by,
        )


def secure_boot_signed_backport(root: Path) -> FakeHost:
    """A Secure Boot node (lockdown integrity) of Ubuntu's kernel running the DKMS backport
    signed with the admin's enrolled key (MOK): the kernel checked it, so its taint has no E."""
    host = FakeHost(root)
    mok = signing_key(MOK_COMMON_NAME, MOK_SERIAL)
    host.boot_efi(secure_boot=True, shim_validation_disabled=False, mok_keys=[mok])
    host.write("proc/version_signature", UBUNTU_VERSION_SIGNATURE)
    host.set_lockdown("integrity")
    add_host_bridge(host)
    _battlemage_card(host)
    _backport_xe(host, file_on_host=True, signed_by=mok)
    return host


MOK_COMMON_NAME = "ACME GPU fleet module signing"
# What only Ubuntu's kernels have (/proc/version_signature): agent/module_keyrings.py.
UBUNTU_VERSION_SIGNATURE = "Ubuntu 6.17.0-7.7-generic 6.17.1\n"
MOK_SERIAL = 0x1D5E7A


# -- ../shared/fixtures.md scenarios ------------------------------------------------------


def host_bridge_only(root: Path) -> FakeHost:
    """1. A cloud VM: an Intel host bridge (no driver, numa -1) and virtio devices, no xe."""
    host = FakeHost(root)
    add_host_bridge(host)
    for index, (device, class_code) in enumerate(
        ((0x1045, 0xFFFF00), (0x1042, 0x018000), (0x1041, 0x020000)), start=1
    ):
        host.add_pci_function(
            f"0000:00:{index:02x}.0",
            vendor=0x1AF4,
            device=device,
            class_code=class_code,
            driver="virtio-pci",
        )
    return host


def arc_b580_in_tree(root: Path, *, kernel_release: str = DEFAULT_RELEASE) -> FakeHost:
    """2. One Arc B580 (e20b) on in-tree xe, behind its switch ports, with its audio."""
    host = FakeHost(root, kernel_release=kernel_release)
    add_host_bridge(host)
    _battlemage_card(host)
    in_tree_xe(host)
    return host


def two_pro_b70_with_vfs(root: Path, *, vf_driver: str = "xe") -> FakeHost:
    """3. Two Pro B70 (e223) with 4 VFs each, VFs bound to `vf_driver` (xe, vfio-pci or
    xe-vfio-pci); xe-bound VFs get their own DRM nodes."""
    host = FakeHost(root)
    add_host_bridge(host)
    vfs_of_pf = []
    for index, pf in enumerate(B70_PFS):
        card = index * 5
        _battlemage_card(
            host, pf, device=0xE223, drm=(f"card{card}", f"renderD{128 + card}"), numa_node=index
        )
        host.remove(f"{host.device_dir(pf)}/sriov_totalvfs")
        for name, value in (
            ("sriov_totalvfs", "12"),
            ("sriov_numvfs", "0"),
            ("sriov_drivers_autoprobe", "1"),
            ("sriov_vf_device", "e223"),
        ):
            host.set_attribute(pf, name, value + "\n")
        vfs_of_pf.append(host.add_vfs(pf, 4, driver=vf_driver, first_drm_minor=card + 1))
    in_tree_xe(host, parameters={"max_vfs": "12"})
    if vf_driver != "xe":
        # A VM per PF holds its 4 passed-through VFs open through /dev/vfio: the first a
        # KubeVirt VM (QEMU in a virt-launcher pod), the second one libvirt runs on the host.
        host.add_module(vf_driver.replace("-", "_"), refcnt=8)
        for pid, cgroup, vfs in zip(VM_PIDS, VM_CGROUPS, vfs_of_pf, strict=True):
            host.add_process(pid, "qemu-kvm", cgroup=cgroup)
            for fd, vf in enumerate(vfs, start=20):
                host.add_vfio_fd(pid, fd, vf)
    return host


# The VMs of scenario 3's passthrough variants: QEMU in a KubeVirt pod, then QEMU on the host.
VM_PIDS = (4711, 4712)
VIRT_LAUNCHER_UID = "5c0ffee0-1111-4222-8333-000000004711"
VM_CGROUPS = (
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
    f"{VIRT_LAUNCHER_UID.replace('-', '_')}.slice/cri-containerd-{'ab' * 32}.scope\n",
    "0::/machine.slice/machine-qemu\\x2d1\\x2dwin11.scope/libvirt/emulator\n",
)


def arc_a770_on_i915(root: Path) -> FakeHost:
    """4. Arc A770 (56a0) bound to i915 and held by Xorg; xe loaded with nothing bound."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host, device=0x56A0, driver="i915")
    host.add_module("i915", refcnt=1, holders=())
    in_tree_xe(host)
    host.add_process(1500, "Xorg")
    host.add_drm_fd(1500, 9, "card0", pdev=B580, client_id=7, driver="i915")
    return host


def dkms_out_of_tree(root: Path) -> FakeHost:
    """5. Out-of-tree xe from DKMS (updates/dkms), taint OE, held by xe_compat."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host)
    _backport_xe(host, file_on_host=True)
    return host


def kmm_out_of_tree(root: Path) -> FakeHost:
    """6. Out-of-tree xe loaded by KMM from its container: no matching file on the host."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host)
    _backport_xe(host, file_on_host=False)
    return host


# Kernel taint bits (the kernel's tainted-kernels documentation): W (9) a warning occurred,
# O (12) an out-of-tree module was loaded, E (13) an unsigned module was loaded.
TAINT_WARN = 1 << 9
TAINT_OOT_MODULE = 1 << 12
TAINT_UNSIGNED_MODULE = 1 << 13


def kmm_healthy(root: Path) -> FakeHost:
    """A B580 on KMM's out-of-tree xe, the kernel tainted only by loading it (O, E)."""
    host = kmm_out_of_tree(root)
    host.write("proc/sys/kernel/tainted", f"{TAINT_OOT_MODULE | TAINT_UNSIGNED_MODULE}\n")
    return host


def kmm_degraded(root: Path) -> FakeHost:
    """The same node after the driver misbehaved: the kernel logged a warning (W, as a GPU
    hang's WARN does) on top of the module's O and E."""
    host = kmm_healthy(root)
    tainted = TAINT_OOT_MODULE | TAINT_UNSIGNED_MODULE | TAINT_WARN
    host.write("proc/sys/kernel/tainted", f"{tainted}\n")
    return host


def open_render_clients(root: Path) -> FakeHost:
    """7. Open render fds: ollama and its forked child share client 42; python3 has client
    43 through two dup'd fds."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host)
    in_tree_xe(host, refcnt=2)
    host.add_process(2101, "ollama")
    host.add_drm_fd(2101, 5, "renderD128", pdev=B580, client_id=42)
    host.add_process(2102, "ollama")
    host.add_drm_fd(2102, 5, "renderD128", pdev=B580, client_id=42)
    host.set_children(2101, [2102])
    host.add_process(2200, "python3")
    host.add_drm_fd(2200, 7, "renderD128", pdev=B580, client_id=43)
    host.add_drm_fd(2200, 8, "renderD128", pdev=B580, client_id=43)
    host.add_process(2300, "bash", fds={3: "/dev/null", 4: "socket:[88123]"})
    return host


def flex_170_force_probe(root: Path) -> FakeHost:
    """8. Flex 170 (56c0, class 0x0380 display controller) on xe via force_probe."""
    host = FakeHost(root)
    add_host_bridge(host)
    host.add_pci_function(ROOT_PORT, device=0xA70D, class_code=0x060400, driver="pcieport")
    host.add_pci_function(
        B580,
        device=0x56C0,
        class_code=0x038000,
        subsystem_device=0x4905,
        revision=0x08,
        parent=ROOT_PORT,
        driver="xe",
        numa_node=0,
        sriov_total_vfs=31,
        drm=("card0", "renderD128"),
    )
    in_tree_xe(host, parameters={"force_probe": "56c0"})
    return host


def lunar_lake_igpu(root: Path) -> FakeHost:
    """9. Lunar Lake iGPU (64a0) at 00:02.0, the boot display, no SR-IOV files."""
    host = FakeHost(root)
    add_host_bridge(host)
    host.add_pci_function(
        IGPU,
        device=0x64A0,
        class_code=0x030000,
        revision=0x04,
        driver="xe",
        boot_vga=True,
        drm=("card0", "renderD128"),
    )
    in_tree_xe(host)
    return host


def meteor_lake_and_battlemage(root: Path) -> FakeHost:
    """10. Meteor Lake iGPU (7d55) on i915 plus a Battlemage B580 on xe."""
    host = FakeHost(root)
    add_host_bridge(host)
    host.add_pci_function(
        IGPU,
        device=0x7D55,
        class_code=0x030000,
        driver="i915",
        boot_vga=True,
        drm=("card0", "renderD128"),
    )
    _battlemage_card(host, drm=("card1", "renderD129"))
    host.add_module("i915", refcnt=0)
    in_tree_xe(host)
    return host


def builtin_xe(root: Path) -> FakeHost:
    """11. xe built into the kernel: only parameters/ under sys/module/xe."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host)
    host.add_module("xe", builtin=True, parameters={"force_probe": "", "max_vfs": "0"})
    return host


def passthrough_unbound(root: Path) -> FakeHost:
    """12. A B580 with no driver and driver_override vfio-pci (set up for passthrough)."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host, driver=None)
    host.set_attribute(B580, "driver_override", "vfio-pci\n")
    in_tree_xe(host)
    return host


def fdinfo_unreadable(root: Path) -> FakeHost:
    """13. A process holds renderD128 but its fdinfo cannot be read (permission denied)."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host)
    in_tree_xe(host, refcnt=1)
    host.add_process(3100, "gnome-shell")
    host.add_drm_fd(3100, 4, "renderD128", pdev=B580, client_id=9)
    host.deny("proc/3100/fdinfo/4")
    return host


def xe_going_held_by_xe_vfio_pci(root: Path) -> FakeHost:
    """14. xe `initstate` going (an unload in flight) and held by xe_vfio_pci."""
    host = FakeHost(root)
    add_host_bridge(host)
    _battlemage_card(host)
    in_tree_xe(host, refcnt=1, holders=("xe_vfio_pci",), initstate="going")
    host.add_module("xe_vfio_pci", refcnt=0)
    return host


SCENARIOS: dict[int, Callable[[Path], FakeHost]] = {
    1: host_bridge_only,
    2: arc_b580_in_tree,
    3: two_pro_b70_with_vfs,
    4: arc_a770_on_i915,
    5: dkms_out_of_tree,
    6: kmm_out_of_tree,
    7: open_render_clients,
    8: flex_170_force_probe,
    9: lunar_lake_igpu,
    10: meteor_lake_and_battlemage,
    11: builtin_xe,
    12: passthrough_unbound,
    13: fdinfo_unreadable,
    14: xe_going_held_by_xe_vfio_pci,
}
