"""Inspect one node under a host root and return its NodeReport.

The one entry point the agent's server and `python -m agent inspect` use. It runs the
readers (PCI, module, module file, /proc clients, VFIO holders), then the pure decisions
(provenance, blockers), then the conversion to protobuf. The clock and the root are
parameters; tests may also pass hand-written `HostFiles` / `ProcSyscalls` that fail chosen reads.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from agent.autoload import read_autoload
from agent.blockers import compute_blockers
from agent.drm_clients import ClientScanOutcome, ScanState, scan_drm_clients
from agent.fdscan import OS_SYSCALLS, ProcSyscalls
from agent.hostfs import HostFiles
from agent.hostroot import validate_host_root
from agent.kernel_trust import loaded_signature, read_kernel_trust
from agent.kmod import ModuleFacts, ModuleState, driver_module_name, open_references, read_module
from agent.module_files import RELEASE_PATH, find_loaded_module_file
from agent.next_kernel import read_next_kernel
from agent.pci import GpuFunction, scan_intel_gpus
from agent.provenance import judge_provenance, parse_backport_tag
from agent.report import build_report, module_message, signature_message
from agent.sysattr import read_attribute
from agent.vfio_holders import scan_vfio_holders
from agent.warninglog import WarningLog
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.build_version import gpuctl_version

MODULE_NAME = "xe"


def inspect_node(
    host_root: Path,
    *,
    node_name: str,
    now: datetime.datetime,
    files: HostFiles | None = None,
    proc_syscalls: ProcSyscalls = OS_SYSCALLS,
) -> pb.NodeReport:
    """The NodeReport of the node mounted at `host_root`, observed at `now`.

    Raises agent.hostroot.HostRootError when `host_root` is not a Linux root; any other bad
    input becomes a warning in the report.
    """
    validate_host_root(host_root)
    files = files if files is not None else HostFiles(host_root)
    log = WarningLog()
    release = read_attribute(files, RELEASE_PATH, log) or ""
    tainted = read_kernel_tainted(files, log)
    pci = scan_intel_gpus(files, log)
    module = read_module(files, MODULE_NAME, log)
    if clients_impossible(files, pci.gpus, module, log):
        client_scan = ClientScanOutcome(
            state=ScanState.SKIPPED_UNUSED,
            message="no GPU driver module holds a reference: no process can have a GPU open",
        )
    else:
        client_scan = scan_drm_clients(files, pci.gpus, log, syscalls=proc_syscalls)
    vfio_scan = scan_vfio_holders(files, pci.gpus, log, syscalls=proc_syscalls)
    loaded = module.state not in (ModuleState.NOT_LOADED, ModuleState.BUILTIN)
    module_file = (
        find_loaded_module_file(files, release, MODULE_NAME, module.srcversion, log)
        if loaded
        else None
    )
    verdict = judge_provenance(
        module.state,
        taint=module.taint,
        version=module.version,
        file_intree=None if module_file is None else module_file.first("intree") == "Y",
        filename=module_file.host_path if module_file else "",
    )
    autoload = read_autoload(files, release, MODULE_NAME, log)
    trust = read_kernel_trust(files, log)
    next_kernel = read_next_kernel(files, release, log)
    module_proto = module_message(
        module,
        verdict,
        backport_tag=parse_backport_tag(module.version or ""),
        filename=module_file.host_path if module_file else "",
    )
    if loaded:
        verified = loaded_signature(module.taint, trust)
        module_proto.signature.CopyFrom(signature_message(verified, module_file))
    return build_report(
        node_name=node_name,
        kernel_release=release,
        now=now,
        agent_version=gpuctl_version(),
        gpus=pci.gpus,
        module=module_proto,
        client_scan=client_scan,
        blockers=compute_blockers(
            module, pci.gpus, client_scan, pci_listed=pci.listed, vfio_scan=vfio_scan
        ),
        warnings=log.entries,
        kernel_tainted=tainted,
        autoload=autoload,
        vfio_scan=vfio_scan,
        trust=trust,
        next_kernel=next_kernel,
    )


def read_kernel_tainted(files: HostFiles, log: WarningLog) -> int | None:
    """The kernel's taint mask (/proc/sys/kernel/tainted), or None with a warning."""
    relative = "proc/sys/kernel/tainted"
    text = read_attribute(files, relative, log)
    if text is None:
        return None
    if not text.isdigit():
        log.add(relative, f"not a taint mask: {text[:40]!r}")
        return None
    return int(text)


def clients_impossible(
    files: HostFiles, gpus: Sequence[GpuFunction], module: ModuleFacts, log: WarningLog
) -> bool:
    """True when every driver module bound to a GPU (and the loaded xe) is loadable and
    holds no reference besides its dependent modules: then nothing has a GPU open.
    A built-in driver, an unknown binding or an unreadable refcnt means "scan"."""
    if any(gpu.driver is None for gpu in gpus):
        return False
    modules = {driver_module_name(files, gpu.driver) for gpu in gpus if gpu.driver}
    if module.state is not ModuleState.NOT_LOADED:
        modules.add(module.name)
    for name in sorted(modules):
        if name == module.name:
            if module.state is ModuleState.BUILTIN or module.refcnt is None:
                return False
            if not module.holders_known or module.refcnt - len(module.holders) != 0:
                return False
        elif open_references(files, name, log) != 0:
            return False
    return True
