"""The people view of a NodeReport: one row per GPU, the module line, blockers in words.

Pure: a NodeReport in, text out. What the agent could not learn is shown as "unknown",
never as zero, so an admin cannot mistake "could not look" for "idle".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.table import format_table
from gpuctl.common.passthrough import VM_PASSTHROUGH_DRIVERS
from gpuctl.common.unload_rule import module_state_name
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rollout.step.gpu_clients import (
    GpuClient,
    client_words,
    pod_of,
    report_clients,
    report_vm_holders,
)

UNKNOWN = "unknown"


def render_report(report: pb.NodeReport, pods: Sequence[PodFacts] | None = None) -> str:
    """The report in words; `pods` (the node's, where the API server was asked) name each
    GPU client's pod, else its pod UID is shown."""
    observed = report.observed_at.ToJsonString() if report.HasField("observed_at") else UNKNOWN
    parts = [
        f"Node {report.node_name or UNKNOWN}  kernel {report.kernel_release or UNKNOWN}"
        f"  observed {observed}\n",
        "\n",
        _devices_section(report),
        "\n",
        f"Module {report.module.name or 'xe'}: {module_summary(report.module)}\n",
        signature_line(report),
        trust_line(report),
        boot_line(report),
        clients_section(report, pods),
        _blockers_section(report),
    ]
    if report.warnings:
        parts.append(f"\nCould not read ({len(report.warnings)}):\n")
        parts.extend(f"  {w.path}: {w.message}\n" for w in report.warnings)
    return "".join(parts)


def _devices_section(report: pb.NodeReport) -> str:
    if not report.devices:
        return "No Intel GPUs (PCI vendor 0x8086, display class) on this node.\n"
    clients_known = report.client_scan.state in (
        pb.ClientScan.COMPLETE,
        pb.ClientScan.SKIPPED_UNUSED,
    )
    rows = [
        [
            ("  " if device.role == pb.Device.VIRTUAL else "") + device.pci_address,
            device_model(device),
            device.driver or "(none)",
            _vfs_cell(device),
            clients_cell(device, clients_known),
        ]
        for device in _pfs_then_their_vfs(report.devices)
    ]
    table = format_table(["ADDRESS", "MODEL", "DRIVER", "VFS", "CLIENTS"], rows)
    if report.client_scan.state == pb.ClientScan.SKIPPED_UNUSED:
        table += (
            "Clients were not scanned: the GPU drivers hold no references, so nothing is open.\n"
        )
    return table + survivability_lines(report.devices)


_SURVIVABILITY_WORDS = {
    pb.Survivability.BOOT: "boot survivability mode: pcode reported a firmware boot failure",
    pb.Survivability.RUNTIME: "runtime survivability mode: a firmware error wedged it",
    pb.Survivability.TYPE_UNKNOWN: "survivability mode (type unknown)",
}


def survivability_lines(devices: Iterable[pb.Device]) -> str:
    """A WARNING per function xe holds in survivability mode, with xe's own details."""
    lines = []
    for device in devices:
        words = _SURVIVABILITY_WORDS.get(device.survivability.mode)
        if words is None:
            continue
        lines.append(
            f"WARNING: {device.pci_address} is in {words}; it serves nothing until its "
            "firmware is flashed (e.g. fwupd)\n"
        )
        lines.extend(f"  {detail}\n" for detail in device.survivability.details)
    return "".join(lines)


def _pfs_then_their_vfs(devices: Iterable[pb.Device]) -> list[pb.Device]:
    """Physical and standalone functions in address order, each followed by its VFs."""
    by_address = sorted(devices, key=lambda d: d.pci_address)
    listed = {device.pci_address for device in by_address}
    vfs_of: dict[str, list[pb.Device]] = {}
    for device in by_address:
        if device.role == pb.Device.VIRTUAL and device.physfn in listed:
            vfs_of.setdefault(device.physfn, []).append(device)
    ordered: list[pb.Device] = []
    for device in by_address:
        if device.role == pb.Device.VIRTUAL and device.physfn in listed:
            continue
        ordered.append(device)
        ordered.extend(vfs_of.get(device.pci_address, []))
    return ordered


def device_model(device: pb.Device) -> str:
    name = device.platform or "unknown Intel GPU"
    if device.role == pb.Device.VIRTUAL:
        name += " VF"
    short_id = device.device_id.removeprefix("0x")
    return f"{name} ({short_id})" if short_id else name


def _vfs_cell(device: pb.Device) -> str:
    if device.role == pb.Device.PHYSICAL:
        sriov = device.sriov
        active = str(sriov.num_vfs) if sriov.HasField("num_vfs") else UNKNOWN
        total = str(sriov.total_vfs) if sriov.HasField("total_vfs") else UNKNOWN
        return f"{active}/{total}"
    if device.role == pb.Device.VIRTUAL:
        return "VF"
    return "-"


def clients_cell(device: pb.Device, clients_known: bool) -> str:
    if device.driver in VM_PASSTHROUGH_DRIVERS:
        return f"{UNKNOWN} (VM)"
    if not clients_known:
        return UNKNOWN
    ids = {(client.pid, cid) for client in device.clients for cid in client.client_ids}
    distinct = len({cid for _, cid in ids})
    # A process holding the node without a client id still counts as a client of its own.
    distinct += sum(1 for client in device.clients if not client.client_ids)
    processes = len({client.pid for client in device.clients})
    if processes == 0:
        return "0"
    plural = "process" if processes == 1 else "processes"
    return f"{distinct} ({processes} {plural})"


def module_summary(module: pb.Module) -> str:
    if module.state in (pb.Module.STATE_UNSPECIFIED, pb.Module.NOT_LOADED):
        return "not loaded" if module.state == pb.Module.NOT_LOADED else UNKNOWN
    if module.state == pb.Module.BUILTIN:
        return "built into the kernel (cannot be unloaded)"
    words = [module_state_name(module.state).lower()]
    provenance = {
        pb.Module.IN_TREE: "in-tree",
        pb.Module.OUT_OF_TREE: "out-of-tree",
    }.get(module.provenance, "provenance unknown")
    release = module.backport_tag or (
        f"srcversion {module.srcversion}" if module.srcversion else ""
    )
    words.append(f"{provenance} {release}".strip())
    words.append(f"refcnt {module.refcnt}" if module.HasField("refcnt") else f"refcnt {UNKNOWN}")
    if module.holders:
        words.append("held by " + ", ".join(module.holders))
    if module.filename:
        words.append(module.filename)
    return ", ".join(words)


def clients_section(report: pb.NodeReport, pods: Sequence[PodFacts] | None) -> str:
    """Each process holding a GPU, and whose it is (docs/gpu-daemons.md); then each process
    holding a function handed to a VM (a VM's QEMU), the same way."""
    parts = []
    clients = report_clients(report)
    if clients:
        parts.append(f"GPU clients ({len(clients)}):\n")
        parts.extend(_holder_line(client, pods) for client in clients)
    holders = report_vm_holders(report)
    if holders:
        parts.append(f"VM holders, through VFIO ({len(holders)}):\n")
        parts.extend(_holder_line(holder, pods) for holder in holders)
    return "".join(parts)


def _holder_line(client: GpuClient, pods: Sequence[PodFacts] | None) -> str:
    """One process in words: by its pod where `pods` know it, by its pod's UID where no pods
    were asked for."""
    if pods is None and client.owner_kind == pb.ProcessOwner.POD:
        return (
            f"  - pod UID {client.pod_uid}, pid {client.pid} ({client.command}), {client.device}\n"
        )
    return f"  - {client_words(client, pod_of(client, pods or ()))}\n"


_SECURE_BOOT = {
    pb.KernelTrust.SECURE_BOOT_NOT_EFI: "no (BIOS boot)",
    pb.KernelTrust.SECURE_BOOT_DISABLED: "off",
    pb.KernelTrust.SECURE_BOOT_ENABLED: "on",
}
_LOCKDOWN = {
    pb.KernelTrust.LOCKDOWN_NOT_AVAILABLE: "not in this kernel",
    pb.KernelTrust.LOCKDOWN_NONE: "none",
    pb.KernelTrust.LOCKDOWN_INTEGRITY: "integrity",
    pb.KernelTrust.LOCKDOWN_CONFIDENTIALITY: "confidentiality",
}
_SIG_ENFORCE = {
    pb.KernelTrust.SIG_ENFORCE_NOT_BUILT: "not built",
    pb.KernelTrust.SIG_ENFORCE_OFF: "off",
    pb.KernelTrust.SIG_ENFORCE_ON: "on",
}
_SIGNATURES = {
    pb.KernelTrust.SIGNATURES_NOT_ENFORCED: "any module loads",
    pb.KernelTrust.SIGNATURES_ENFORCED: "only modules signed with a key it trusts load",
}


def trust_line(report: pb.NodeReport) -> str:
    """What the kernel will accept as a module (docs/agent.md#what-the-kernel-accepts)."""
    if not report.HasField("kernel_trust"):
        return f"Module signatures: {UNKNOWN} (an older agent).\n"
    trust = report.kernel_trust
    shim = " (shim validation off)" if trust.shim_validation_disabled else ""
    verdict = _SIGNATURES.get(trust.signatures, f"{UNKNOWN} whether unsigned modules load")
    line = (
        f"Kernel: Secure Boot {_SECURE_BOOT.get(trust.secure_boot, UNKNOWN)}{shim}, lockdown "
        f"{_LOCKDOWN.get(trust.lockdown, UNKNOWN)}, sig_enforce "
        f"{_SIG_ENFORCE.get(trust.sig_enforce, UNKNOWN)}: {verdict}.\n"
    )
    if trust.HasField("mok_list"):
        keys = ", ".join(f"{k.signer!r} {k.key_id}" for k in trust.mok_list.keys) or "none"
        line += f"  enrolled MOK keys: {keys}\n"
    return line


def _enrolled(report: pb.NodeReport, signature: pb.ModuleSignature) -> str:
    """ " (an enrolled MOK)" when the file's key is one of the node's MOK keys."""
    keys = report.kernel_trust.mok_list.keys
    if any((k.signer, k.key_id) == (signature.signer, signature.key_id) for k in keys):
        return " (an enrolled MOK)"
    return ""


def signature_line(report: pb.NodeReport) -> str:
    """The loaded module's signature: the kernel's word, then its file's ("" when none)."""
    if not report.module.HasField("signature"):
        return ""
    signature = report.module.signature
    verified = {
        pb.ModuleSignature.VERIFIED: "verified by the kernel",
        pb.ModuleSignature.UNVERIFIED: "NOT verified by the kernel (unsigned or untrusted: E)",
    }.get(signature.verified, f"verification {UNKNOWN}")
    if signature.file == pb.ModuleSignature.FILE_SIGNED:
        file = (
            f"; its file signed by {signature.signer or UNKNOWN!r}, key "
            f"{signature.key_id or UNKNOWN}{_enrolled(report, signature)}, "
            f"{signature.hash_algorithm or UNKNOWN}"
        )
    elif signature.file == pb.ModuleSignature.FILE_UNSIGNED:
        file = "; its file is unsigned"
    else:
        file = ""
    return f"  signature: {verified}{file}\n"


def boot_line(report: pb.NodeReport) -> str:
    """What the next boot does with the kernel's in-tree module (docs/reboots.md)."""
    name = report.module.name or "xe"
    autoload = report.in_tree_autoload
    why = f" ({'; '.join(autoload.sources)})" if autoload.sources else ""
    words = {
        pb.InTreeAutoload.NO_IN_TREE_MODULE: f"this kernel has no in-tree {name}",
        pb.InTreeAutoload.BLACKLISTED: f"the in-tree {name} is blacklisted{why}",
        pb.InTreeAutoload.AUTOLOADS: (
            f"WARNING: the in-tree {name} loads by itself{why}; after a reboot KMM's loader "
            "removes it again once the GPU is idle, from under whatever started on it. "
            "Blacklist it (docs/reboots.md)"
        ),
        pb.InTreeAutoload.DISABLED: (
            f"WARNING: no {name} can load{why}, KMM's neither; remove that line"
        ),
    }.get(autoload.state, f"unknown whether the in-tree {name} loads by itself")
    return f"At boot: {words}.\n"


def _blockers_section(report: pb.NodeReport) -> str:
    name = report.module.name or "xe"
    if report.blockers:
        lines = [f"Unloading {name} now would fail or hurt:\n"]
        # The agent's messages name the PCI function themselves.
        lines.extend(f"  - {blocker.message}\n" for blocker in report.blockers)
        return "".join(lines)
    if report.module.state == pb.Module.NOT_LOADED:
        return f"{name} is not loaded: nothing to unload.\n"
    return f"Nothing blocks unloading {name}.\n"
