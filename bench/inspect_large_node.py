"""A full inspection of a synthetic large GPU node: median and p95, with same-run baselines.

The node (tests.fakehost.scenarios.large_node): 8 physical functions with 16 active VFs each,
60 other PCI functions, and a /proc of 3,000 processes x 40 fds, 200 of them DRM fds across
60 clients. Printed:
- the full inspection (PCI, module, module file, client scan, blockers, protobuf);
- a naive baseline: one plain pathlib readlink of every fd under the same /proc, nothing
  else (ratio = the whole inspection against reading the fd links the obvious way);
- the same node when no GPU driver module holds a reference, so the client scan is skipped
  (ratio = what the skip saves).

    .venv/bin/python -m bench.inspect_large_node [--runs 30]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

from agent.inspect import inspect_node
from bench.timing import measure, measure_interleaved, ratio_line
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from tests.fakehost.scenarios import LARGE_CLIENTS, large_node

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)


def read_every_fd_link(proc: Path) -> int:
    """The naive baseline: readlink every /proc/<pid>/fd/<n>, keep nothing."""
    count = 0
    for process in proc.iterdir():
        if process.name.isdigit():
            for fd in (process / "fd").iterdir():
                fd.readlink()
                count += 1
    return count


def inspect(root: Path) -> pb.NodeReport:
    return inspect_node(root, node_name="large", now=NOW)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    # sysfs and procfs live in memory; build the fake node in memory too where possible.
    scratch = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        root = Path(tmp)
        host = large_node(root)
        report = inspect(root)
        clients = {cid for d in report.devices for c in d.clients for cid in c.client_ids}
        print(
            f"large node: {len(report.devices)} GPU functions, "
            f"{report.client_scan.processes_scanned} processes, {len(clients)} clients "
            f"(expected {LARGE_CLIENTS}), {len(report.blockers)} blockers"
        )
        if len(clients) != LARGE_CLIENTS:
            print("the inspection did not find every client", file=sys.stderr)
            return 1
        full, floor = measure_interleaved(
            {
                "full inspection": lambda: inspect(root),
                "plain pathlib fd sweep": lambda: read_every_fd_link(root / "proc"),
            },
            runs,
        )
        # Nothing holds the drivers now: xe's only reference is its xe_compat holder.
        host.write("sys/module/xe/refcnt", "1\n")
        host.write("sys/module/vfio_pci/refcnt", "0\n")
        skipped_report = inspect(root)
        if skipped_report.client_scan.state != pb.ClientScan.SKIPPED_UNUSED:
            print("the client scan was not skipped for an unused module", file=sys.stderr)
            return 1
        skipped = measure("inspection, client scan skipped", lambda: inspect(root), runs)
    for timings in (full, floor, skipped):
        print(timings.summary())
    print(ratio_line(full, floor))
    print(ratio_line(skipped, full))
    return 0


if __name__ == "__main__":
    sys.exit(main())
