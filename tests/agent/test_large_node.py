"""The synthetic large node the benchmark uses: built quickly, and inspected right."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.fdscan import find_fd_holders
from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost
from testbed.fakehost import large_node as s
from testbed.fakehost.faults import HostFilesWithoutDebugfs
from testbed.fakehost.host import FIXED_NOW

SHM = Path("/dev/shm")


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeHost, float]]:
    """The large node, on tmpfs when the machine has one (120,000 symlinks on a busy disk
    take much longer than in memory), else under pytest's temporary directory."""
    with tempfile.TemporaryDirectory(
        dir=SHM if SHM.is_dir() else tmp_path_factory.mktemp("large")
    ) as directory:
        started = time.perf_counter()
        host = s.large_node(Path(directory))
        yield host, time.perf_counter() - started


def test_large_node_builds_in_seconds(large: tuple[FakeHost, float]) -> None:
    _, seconds = large
    assert seconds < 20


def test_large_node_devices(large: tuple[FakeHost, float]) -> None:
    report = large[0].inspect()
    roles = Counter(d.role for d in report.devices)
    assert roles == {
        pb.Device.PHYSICAL: s.LARGE_PFS,
        pb.Device.VIRTUAL: s.LARGE_PFS * s.LARGE_VFS_PER_PF,
    }
    pfs = [d for d in report.devices if d.role == pb.Device.PHYSICAL]
    assert [pf.pci_address for pf in pfs] == [s.large_node_pf(i) for i in range(s.LARGE_PFS)]
    for pf in pfs:
        assert pf.sriov.num_vfs == s.LARGE_VFS_PER_PF
        assert [vf.driver for vf in pf.sriov.vfs] == ["xe", "vfio-pci"] * (s.LARGE_VFS_PER_PF // 2)


def test_large_node_clients_from_the_kernel_lists(large: tuple[FakeHost, float]) -> None:
    report = large[0].inspect()
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    # The 60 processes the kernel's lists name and their 10 forked children; no sweep.
    assert report.client_scan.processes_scanned == s.LARGE_CLIENTS + 10
    assert_large_node_clients(report)


def test_large_node_same_answers_without_debugfs(large: tuple[FakeHost, float]) -> None:
    """The kernel's lists and the /proc sweep agree on the large node: same devices with the
    same clients (pid, command, client ids, fd count), same blockers, same warnings."""
    host = large[0]
    listed = host.inspect()
    swept = inspect_node(
        host.root,
        node_name="gpu-node-1",
        now=FIXED_NOW,
        files=HostFilesWithoutDebugfs(host.root),
    )
    assert swept.client_scan.processes_scanned == s.LARGE_PROCESSES + 1  # and init
    assert "swept /proc" in swept.client_scan.message
    assert_large_node_clients(swept)
    assert list(listed.devices) == list(swept.devices)
    assert list(listed.blockers) == list(swept.blockers)
    assert list(listed.warnings) == list(swept.warnings) == []


def assert_large_node_clients(report: pb.NodeReport) -> None:
    clients = [c for d in report.devices for c in d.clients]
    assert len(clients) == s.LARGE_CLIENTS + 10
    assert sum(c.fd_count for c in clients) == s.LARGE_DRM_FDS
    ids = {(d.pci_address, i) for d in report.devices for c in d.clients for i in c.client_ids}
    assert len(ids) == s.LARGE_CLIENTS
    reasons = Counter(b.reason for b in report.blockers)
    # Every reference is a visible client: no MODULE_IN_USE.
    assert reasons == {
        pb.Blocker.OPEN_CLIENTS: s.LARGE_PFS,
        pb.Blocker.ACTIVE_VFS: s.LARGE_PFS,
        pb.Blocker.MODULE_HOLDERS: 1,
    }


def test_fd_scan_core_on_the_large_node(large: tuple[FakeHost, float]) -> None:
    result = find_fd_holders(large[0].path("proc"), prefix="/dev/dri/")
    assert len(result.holders) == s.LARGE_CLIENTS + 10
    assert sum(len(held) for held in result.holders.values()) == s.LARGE_DRM_FDS
    one_node = find_fd_holders(
        large[0].path("proc"), frozenset({f"/dev/dri/{s.large_node_render(0)}"})
    )
    assert sum(len(held) for held in one_node.holders.values()) == 3 * 8 + 2 * 2
