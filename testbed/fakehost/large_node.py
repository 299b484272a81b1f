"""A large synthetic node for benchmarks and the agent's scale tests: `large_node`.

Apart from scenarios.py (one builder per fixtures.md layout) because it is no fixture layout:
8 Pro B70 PFs with 16 VFs each, 60 other PCI functions and 3,000 processes, sized so the
inspection's client scan and VFIO sweep have work (bench/inspect_large_node.py,
tests/agent/test_large_node.py). The constants name what tests and the benchmark assert on.
"""

from __future__ import annotations

from pathlib import Path

from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import BACKPORT_SRCVERSION, BACKPORT_VERSION, add_host_bridge

LARGE_PFS = 8
LARGE_VFS_PER_PF = 16
LARGE_OTHER_FUNCTIONS = 60
LARGE_PROCESSES = 3000
LARGE_FDS_PER_PROCESS = 40
LARGE_CLIENTS = 60
LARGE_DRM_FDS = 200
LARGE_FIRST_PID = 1000
# 72 DRM devices: more cards than the 64 below render minor 128, so render nodes start at
# 256 (minor numbers are unique across cards and render nodes, as the kernel's are).
LARGE_RENDER_BASE = 256


def large_node_pf(index: int) -> str:
    return f"0000:{0x10 + index * 0x10:02x}:00.0"


def large_node_render(index: int) -> str:
    """The render node of PF `index` of the large node."""
    return f"renderD{LARGE_RENDER_BASE + index * 17}"


def large_node(root: Path, *, debugfs: str | None = "id", vms: bool = False) -> FakeHost:
    """8 Pro B70 PFs with 16 active VFs each (even VFs on xe, odd on vfio-pci), 60 other
    PCI functions, and 3,000 processes x 40 fds of which 200 DRM fds belong to 60 clients
    (60 owners with 3 dup'd fds each, 10 forked children sharing an owner's id with 2 fds).
    xe's refcnt is 60 plus its xe_compat holder, so the client scan must run. debugfs is
    mounted (the kernel's client lists in `debugfs` style) unless `debugfs` is None.
    With `vms`, 16 of the processes are VMs (QEMU in pods) each holding 4 of the vfio-pci
    VFs open through /dev/vfio, so the VFIO holder sweep must run; without, no VM runs
    (vfio_pci holds no reference)."""
    host = FakeHost(root)
    if debugfs is not None:
        host.enable_debugfs(debugfs)
    add_host_bridge(host)
    others = 1
    for index in range(LARGE_PFS):
        pf = large_node_pf(index)
        port = f"0000:00:{index + 1:02x}.0"
        host.add_pci_function(port, device=0xA70D, class_code=0x060400, driver="pcieport")
        host.add_pci_function(
            pf,
            device=0xE223,
            class_code=0x030000,
            parent=port,
            driver="xe",
            numa_node=index // 4,
            boot_vga=False,
            sriov_total_vfs=LARGE_VFS_PER_PF,
            drm=(f"card{index * 17}", large_node_render(index)),
        )
        others += 1
        host.add_vfs(
            pf,
            LARGE_VFS_PER_PF,
            driver=["xe" if vf % 2 == 0 else "vfio-pci" for vf in range(LARGE_VFS_PER_PF)],
            first_drm_minor=index * 17 + 1,
            render_offset=LARGE_RENDER_BASE,
        )
    for number in range(LARGE_OTHER_FUNCTIONS - others):
        vendor, device, class_code, driver = (
            (0x15B3, 0x1021, 0x020000, "mlx5_core"),
            (0x144D, 0xA80A, 0x010802, "nvme"),
            (0x8086, 0x0B60, 0x010802, "nvme"),
            (0x8086, 0x1592, 0x020000, "ice"),
        )[number % 4]
        host.add_pci_function(
            f"0000:{0xA0 + number:02x}:00.0",
            vendor=vendor,
            device=device,
            class_code=class_code,
            driver=driver,
        )
    host.add_module(
        "xe",
        refcnt=LARGE_CLIENTS + 1,
        holders=("xe_compat",),
        srcversion=BACKPORT_SRCVERSION,
        version=BACKPORT_VERSION,
        taint="OE",
    )
    host.add_module("xe_compat", taint="OE")
    passthrough = host.functions_bound_to("vfio-pci")
    host.add_module("vfio_pci", refcnt=len(passthrough) if vms else 0)
    _large_node_processes(host, passthrough if vms else [])
    return host


def _large_node_cgroup(pid: int, in_pod: object) -> str:
    """A GPU client runs in a pod (systemd cgroup driver, containerd); the rest on the host."""
    if not in_pod:
        return f"0::/system.slice/worker-{pid}.service\n"
    uid = f"{pid:08x}_0000_4000_8000_{pid:012x}"
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{uid}.slice/cri-containerd-{pid:064x}.scope\n"
    )


def _large_node_processes(host: FakeHost, passthrough: list[str]) -> None:
    """The 3,000 processes; with `passthrough` VFs, a VM (not a DRM client) per 4 of them."""
    drm_fds: dict[int, list[tuple[int, int]]] = {}  # pid -> [(client id, PF index)]
    owners = [LARGE_FIRST_PID + 7 + 41 * k for k in range(LARGE_CLIENTS)]
    children = [pid + 1 for pid in owners[:10]]
    free = (p for p in range(LARGE_FIRST_PID + 2, 10**6, 97) if p not in {*owners, *children})
    vms = {next(free): passthrough[k : k + 4] for k in range(0, len(passthrough), 4)}
    for k, pid in enumerate(owners):
        drm_fds[pid] = [(100 + k, k % LARGE_PFS)] * 3
    for k, pid in enumerate(children):
        drm_fds[pid] = [(100 + k, k % LARGE_PFS)] * 2
    assert sum(len(v) for v in drm_fds.values()) == LARGE_DRM_FDS
    for pid in range(LARGE_FIRST_PID, LARGE_FIRST_PID + LARGE_PROCESSES):
        held = drm_fds.get(pid, [])
        vfs = vms.get(pid, [])
        ordinary = LARGE_FDS_PER_PROCESS - 3 - len(held) - len(vfs)
        fds = {
            3 + n: (
                f"socket:[{pid * 64 + n}]",
                f"pipe:[{pid * 64 + n}]",
                f"/var/log/app/{pid}-{n}.log",
                "anon_inode:[eventfd]",
            )[n % 4]
            for n in range(ordinary)
        }
        host.add_process(
            pid,
            "qemu-kvm" if vfs else "worker" if not held else "inference",
            fds=fds,
            cgroup=_large_node_cgroup(pid, held or vfs),
        )
        for offset, vf in enumerate(vfs):
            host.add_vfio_fd(pid, 3 + ordinary + offset, vf)
        for offset, (client_id, pf_index) in enumerate(held):
            node = large_node_render(pf_index)
            # Every fifth client's kernel does not print drm-pdev: matched by node name.
            pdev = None if client_id % 5 == 0 else large_node_pf(pf_index)
            host.add_drm_fd(pid, 3 + ordinary + offset, node, pdev=pdev, client_id=client_id)
    for child in children:
        host.set_children(child - 1, [child])
