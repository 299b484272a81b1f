"""A full inspection of a synthetic large GPU node: median and p95, with same-run baselines.

The node (testbed.fakehost.large_node): 8 physical functions with 16 active VFs each,
60 other PCI functions, a /proc of 3,000 processes x 40 fds, 200 of them DRM fds across 60
clients, and debugfs with the kernel's DRM client list of each of the 72 DRM devices.
Printed:
- the full inspection (PCI, module, module file, client scan, blockers, protobuf), its
  clients found from the kernel's lists (only the processes they name are examined);
- the baseline: the same inspection where debugfs is not mounted, so every process under
  /proc is swept (today's scan on most nodes; ratio = what the kernel's lists save);
- the same node when no GPU driver module holds a reference, so the client scan is skipped
  (ratio = the floor: PCI, module and report alone);
- the full inspection where no /proc/<pid>/cgroup can be found, so no client's owner is read
  (ratio = what naming each client's pod from its cgroup costs);
- the same node where 16 of the processes are VMs holding the 64 vfio-pci VFs open, so the
  VFIO holder sweep runs (no kernel list names them), against the node where no VM runs
  (ratio = what naming every VF's VM costs).
Both inspections must give the same devices, clients and blockers, or the benchmark fails.
Wall-clock medians move with the machine's load; the CPU time per inspection (this
process's user + system time, `time.process_time`) moves much less, so it is printed too.

    .venv/bin/python -m bench.inspect_large_node [--runs 30]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent.hostfs import HostFiles
from agent.inspect import inspect_node
from bench.timing import measure, measure_interleaved, ratio_line
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost.faults import HostFilesWithoutDebugfs
from testbed.fakehost.large_node import LARGE_CLIENTS, LARGE_PFS, LARGE_VFS_PER_PF, large_node

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)


def inspect(root: Path) -> pb.NodeReport:
    return inspect_node(root, node_name="large", now=NOW)


def inspect_by_sweep(root: Path) -> pb.NodeReport:
    return inspect_node(root, node_name="large", now=NOW, files=HostFilesWithoutDebugfs(root))


class HostFilesWithoutCgroups(HostFiles):
    """HostFiles where no process's cgroup file is found: no client's owner is read."""

    def read_bytes(self, relative: str) -> bytes:
        if relative.startswith("proc/") and relative.endswith("/cgroup"):
            raise FileNotFoundError(2, "No such file or directory", self.path(relative))
        return super().read_bytes(relative)


def inspect_without_owners(root: Path) -> pb.NodeReport:
    return inspect_node(root, node_name="large", now=NOW, files=HostFilesWithoutCgroups(root))


def cpu_ms(action: Callable[[], object], runs: int) -> float:
    """Mean CPU time of `action` in milliseconds (user + system of this process)."""
    started = time.process_time()
    for _ in range(runs):
        action()
    return (time.process_time() - started) / runs * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    # sysfs and procfs live in memory; build the fake node in memory too where possible.
    scratch = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        root = Path(tmp)
        host = large_node(root)
        report, swept = inspect(root), inspect_by_sweep(root)
        clients = {cid for d in report.devices for c in d.clients for cid in c.client_ids}
        print(
            f"large node: {len(report.devices)} GPU functions, {len(clients)} clients "
            f"(expected {LARGE_CLIENTS}), {len(report.blockers)} blockers; "
            f"{report.client_scan.processes_scanned} processes examined from the kernel's "
            f"lists, {swept.client_scan.processes_scanned} by the sweep"
        )
        if len(clients) != LARGE_CLIENTS:
            print("the inspection did not find every client", file=sys.stderr)
            return 1
        if (list(report.devices), list(report.blockers)) != (
            list(swept.devices),
            list(swept.blockers),
        ):
            print("the kernel's lists and the sweep disagree", file=sys.stderr)
            return 1
        listed, sweep = measure_interleaved(
            {
                "full inspection (kernel client lists)": lambda: inspect(root),
                "full inspection (/proc sweep, no debugfs)": lambda: inspect_by_sweep(root),
            },
            runs,
        )
        owned, unowned = measure_interleaved(
            {
                "full inspection (owners from cgroups)": lambda: inspect(root),
                "full inspection (owners not read)": lambda: inspect_without_owners(root),
            },
            runs,
        )
        pods = {c.owner.pod_uid for d in report.devices for c in d.clients if c.owner.pod_uid}
        if not pods:
            print("no client was named by its pod", file=sys.stderr)
            return 1
        vm_root = root / "with-vms"
        vm_root.mkdir()
        large_node(vm_root, vms=True)
        vm_report = inspect(vm_root)
        held = [h for d in vm_report.devices for h in d.vfio_holders if h.owner.pod_uid]
        if len(held) != LARGE_PFS * LARGE_VFS_PER_PF // 2:
            print(f"{len(held)} VFs named by their VM's pod, not every one", file=sys.stderr)
            return 1
        with_vms, without_vms = measure_interleaved(
            {
                "full inspection (16 VMs: VFIO holders swept)": lambda: inspect(vm_root),
                "full inspection (no VM runs)": lambda: inspect(root),
            },
            runs,
        )
        listed_cpu = cpu_ms(lambda: inspect(root), runs)
        sweep_cpu = cpu_ms(lambda: inspect_by_sweep(root), runs)
        # Nothing holds the drivers now: xe's only reference is its xe_compat holder.
        host.write("sys/module/xe/refcnt", "1\n")
        host.write("sys/module/vfio_pci/refcnt", "0\n")
        skipped_report = inspect(root)
        if skipped_report.client_scan.state != pb.ClientScan.SKIPPED_UNUSED:
            print("the client scan was not skipped for an unused module", file=sys.stderr)
            return 1
        skipped = measure("inspection, client scan skipped", lambda: inspect(root), runs)
    for timings in (listed, sweep, skipped, owned, unowned, with_vms, without_vms):
        print(timings.summary())
    print(
        f"CPU per inspection: kernel client lists {listed_cpu:.1f} ms, /proc sweep "
        f"{sweep_cpu:.1f} ms (ratio {listed_cpu / sweep_cpu:.2f})"
    )
    print(ratio_line(listed, sweep))
    print(ratio_line(skipped, listed))
    print(ratio_line(owned, unowned))
    print(ratio_line(with_vms, without_vms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
