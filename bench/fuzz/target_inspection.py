"""Fuzz a whole inspection: a small fake node (two GPUs, DRM clients, a forked child,
debugfs client lists, a module file) whose files the input overwrites (/proc layouts: comm,
fdinfo, children lists, fd links; sysfs attributes and links; debugfs; module files) before
`inspect_node` runs. An inspection never raises: everything unreadable or garbled is a
warning, and unknown is never "no clients". The originals are put back after each input."""

from __future__ import annotations

import atexit
import datetime
import os
import shutil
import tempfile
from pathlib import Path

import atheris

from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost.scenarios import B580, open_render_clients

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)
_scratch = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
ROOT = Path(tempfile.mkdtemp(prefix="gpuctl-fuzz-", dir=_scratch))
atexit.register(shutil.rmtree, ROOT, True)
HOST = open_render_clients(ROOT)
HOST.enable_debugfs("id")
DEVICE = HOST.device_dir(B580)

# Files an input may overwrite (contents), and symlinks it may repoint (targets).
FILES = [
    "proc/2101/comm",
    "proc/2101/fdinfo/5",
    "proc/2200/fdinfo/7",
    "proc/2101/task/2101/children",
    HOST.debugfs_clients_path(B580),
    "sys/module/xe/refcnt",
    "sys/module/xe/initstate",
    "sys/module/xe/srcversion",
    "sys/module/xe/taint",
    "proc/sys/kernel/osrelease",
    f"{DEVICE}/vendor",
    f"{DEVICE}/class",
    f"{DEVICE}/device",
    f"{DEVICE}/numa_node",
    f"{DEVICE}/driver_override",
    f"{DEVICE}/drm/card0/dev",
    "lib/modules/6.8.0-60-generic/modules.dep",
]
LINKS = ["proc/2101/fd/5", "proc/2200/fd/8", f"{DEVICE}/driver"]
ORIGINAL_FILES = {path: HOST.real(path).read_bytes() for path in FILES}
ORIGINAL_LINKS = {path: str(HOST.real(path).readlink()) for path in LINKS}

SEEDS = [b"\x00", b"\x01\x04" + b"command tgid dev master a uid magic\n"]


def fuzz_one(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    try:
        for _ in range(provider.ConsumeIntInRange(0, 3)):
            if provider.ConsumeBool():
                path = provider.PickValueInList(FILES)
                HOST.real(path).write_bytes(
                    provider.ConsumeBytes(provider.ConsumeIntInRange(0, 300))
                )
            else:
                path = provider.PickValueInList(LINKS)
                target = provider.ConsumeUnicodeNoSurrogates(40).replace("\0", "")
                if target:
                    HOST.symlink(path, target)
        report = inspect_node(ROOT, node_name="fuzz", now=NOW)
        report.SerializeToString()
        module = report.module
        references = module.refcnt - len(module.holders) if module.HasField("refcnt") else 0
        if module.state == pb.Module.LIVE and references > 0:
            # Something holds xe: whatever the scan found, an unload is blocked.
            assert report.blockers, report
    finally:
        for path, content in ORIGINAL_FILES.items():
            HOST.real(path).write_bytes(content)
        for path, target in ORIGINAL_LINKS.items():
            HOST.symlink(path, target)
