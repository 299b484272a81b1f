"""Turn the facts the readers gathered into the NodeReport protobuf (the public contract).

Only conversion lives here: no reads and no decisions. Values read as unknown stay absent
(fields with presence) or empty, and are explained by the report's warnings.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from agent.autoload import Autoload, AutoloadFacts
from agent.blockers import BlockerFact
from agent.cgroup_owner import OwnerKind, ProcessOwner
from agent.drm_clients import ClientScanOutcome
from agent.kernel_trust import KernelTrust, Verified
from agent.kmod import ModuleFacts, ModuleState
from agent.module_files import ModuleFile
from agent.next_kernel import NextKernel
from agent.pci import GpuFunction
from agent.platforms import platform_name
from agent.provenance import ProvenanceVerdict
from agent.vfio_holders import VfioScanOutcome
from agent.warninglog import ReadWarning
from gpuctl.api.v1alpha1 import node_report_pb2 as pb


def _hex(value: int | None, digits: int) -> str:
    return "" if value is None else f"0x{value:0{digits}x}"


def device_message(
    gpu: GpuFunction, client_scan: ClientScanOutcome, vfio_scan: VfioScanOutcome | None = None
) -> pb.Device:
    device = pb.Device(
        pci_address=gpu.address,
        vendor_id=_hex(gpu.vendor_id, 4),
        device_id=_hex(gpu.device_id, 4),
        class_code=_hex(gpu.class_code, 6),
        subsystem_vendor_id=_hex(gpu.subsystem_vendor_id, 4),
        subsystem_device_id=_hex(gpu.subsystem_device_id, 4),
        revision=_hex(gpu.revision, 2),
        driver=gpu.driver or "",
        role=pb.Device.Role.Value(gpu.role.value),
        physfn=gpu.physfn,
        platform=platform_name(gpu.device_id) if gpu.device_id is not None else "",
        driver_override=gpu.driver_override,
        boot_vga=gpu.boot_vga,
    )
    if gpu.numa_node is not None:
        device.numa_node = gpu.numa_node
    if gpu.sriov is not None:
        device.sriov.CopyFrom(
            pb.Sriov(
                total_vfs=gpu.sriov.total_vfs,
                num_vfs=gpu.sriov.num_vfs,
                drivers_autoprobe=gpu.sriov.drivers_autoprobe,
                vf_device_id=gpu.sriov.vf_device_id,
                vfs=[
                    pb.VirtualFunction(pci_address=vf.address, driver=vf.driver or "")
                    for vf in gpu.sriov.vfs
                ],
            )
        )
    if gpu.drm_nodes:
        device.drm.CopyFrom(pb.DrmNodes(card=gpu.drm_card, render=gpu.drm_render))
    for client in sorted(client_scan.clients_by_device.get(gpu.address, []), key=lambda c: c.pid):
        device.clients.append(
            pb.DrmClient(
                pid=client.pid,
                command=client.command,
                client_ids=sorted(client.client_ids),
                fd_count=client.fd_count,
                owner=owner_message(client.owner),
            )
        )
    if gpu.survivability is not None:
        device.survivability.CopyFrom(
            pb.Survivability(
                mode=pb.Survivability.Mode.Value(gpu.survivability.mode.value),
                details=gpu.survivability.details,
            )
        )
    if vfio_scan is not None:
        device.iommu_group = vfio_scan.iommu_groups.get(gpu.address, "")
        for holder in vfio_scan.holders_by_device.get(gpu.address, []):
            device.vfio_holders.append(
                pb.VfioHolder(
                    pid=holder.pid,
                    command=holder.command,
                    paths=holder.paths,
                    fd_count=holder.fd_count,
                    owner=owner_message(holder.owner),
                )
            )
    return device


def scan_message(
    scan: ClientScanOutcome | VfioScanOutcome,
) -> pb.ClientScan:
    return pb.ClientScan(
        state=pb.ClientScan.State.Value(scan.state.value),
        processes_scanned=scan.processes_scanned,
        processes_denied=scan.processes_denied,
        message=scan.message,
    )


_OWNER_KINDS = {
    OwnerKind.POD: pb.ProcessOwner.POD,
    OwnerKind.HOST: pb.ProcessOwner.HOST,
    OwnerKind.UNKNOWN: pb.ProcessOwner.UNKNOWN,
}


def owner_message(owner: ProcessOwner | None) -> pb.ProcessOwner | None:
    """The report's ProcessOwner (None, left unset, when nobody looked: unknown)."""
    if owner is None:
        return None
    return pb.ProcessOwner(
        kind=_OWNER_KINDS[owner.kind],
        pod_uid=owner.pod_uid,
        container_id=owner.container_id,
        message=owner.why,
    )


_MODULE_STATES = {
    ModuleState.NOT_LOADED: pb.Module.NOT_LOADED,
    ModuleState.LIVE: pb.Module.LIVE,
    ModuleState.COMING: pb.Module.COMING,
    ModuleState.GOING: pb.Module.GOING,
    ModuleState.BUILTIN: pb.Module.BUILTIN,
    ModuleState.UNKNOWN: pb.Module.STATE_UNSPECIFIED,
}


def module_message(
    module: ModuleFacts, verdict: ProvenanceVerdict, *, backport_tag: str, filename: str
) -> pb.Module:
    message = pb.Module(
        name=module.name,
        state=_MODULE_STATES[module.state],
        version=module.version or "",
        srcversion=module.srcversion,
        taint=module.taint or "",
        holders=module.holders,
        parameters=module.parameters,
        provenance=pb.Module.Provenance.Value(verdict.provenance.value),
        provenance_evidence=verdict.evidence,
        backport_tag=backport_tag,
        filename=filename,
    )
    if module.refcnt is not None:
        message.refcnt = module.refcnt
    return message


def signature_message(verified: Verified, module_file: ModuleFile | None) -> pb.ModuleSignature:
    """The loaded module's signature: the kernel's word (taint), then its file's, if found."""
    message = pb.ModuleSignature(verified=pb.ModuleSignature.Verified.Value(verified.value))
    if module_file is None or module_file.signature_error:
        return message
    signature = module_file.signature
    if signature is None:
        message.file = pb.ModuleSignature.FILE_UNSIGNED
        return message
    message.file = pb.ModuleSignature.FILE_SIGNED
    message.signer = signature.signer
    message.key_id = signature.key_id
    message.hash_algorithm = signature.hash_algorithm
    return message


def trust_message(trust: KernelTrust) -> pb.KernelTrust:
    message = pb.KernelTrust(
        secure_boot=pb.KernelTrust.SecureBoot.Value(trust.secure_boot.value),
        lockdown=pb.KernelTrust.Lockdown.Value(trust.lockdown.value),
        sig_enforce=pb.KernelTrust.SigEnforce.Value(trust.sig_enforce.value),
        signatures=pb.KernelTrust.Signatures.Value(trust.signatures.value),
    )
    if trust.shim_validation_disabled is not None:
        message.shim_validation_disabled = trust.shim_validation_disabled
    if trust.enrolled_keys is not None:
        message.mok_list.CopyFrom(
            pb.MokList(
                keys=[pb.EnrolledKey(signer=k.signer, key_id=k.key_id) for k in trust.enrolled_keys]
            )
        )
    keyrings = trust.keyrings
    if keyrings.mok_list_trusted is not None:
        message.mok_list_trusted = keyrings.mok_list_trusted
    if keyrings.db_keys is not None:
        keys = [pb.EnrolledKey(signer=k.signer, key_id=k.key_id) for k in keyrings.db_keys]
        message.db_keys.CopyFrom(pb.MokList(keys=keys))
    if keyrings.platform_keys_verify_modules is not None:
        message.platform_keys_verify_modules = keyrings.platform_keys_verify_modules
    return message


def build_report(
    *,
    node_name: str,
    kernel_release: str,
    now: datetime.datetime,
    agent_version: str,
    gpus: Sequence[GpuFunction],
    module: pb.Module,
    client_scan: ClientScanOutcome,
    blockers: Sequence[BlockerFact],
    warnings: Sequence[ReadWarning],
    kernel_tainted: int | None = None,
    autoload: AutoloadFacts | None = None,
    vfio_scan: VfioScanOutcome | None = None,
    trust: KernelTrust | None = None,
    next_kernel: NextKernel | None = None,
) -> pb.NodeReport:
    report = pb.NodeReport(
        node_name=node_name,
        kernel_release=kernel_release,
        agent_version=agent_version,
        devices=[device_message(gpu, client_scan, vfio_scan) for gpu in gpus],
        module=module,
        blockers=[
            pb.Blocker(
                reason=pb.Blocker.Reason.Value(b.reason.value),
                message=b.message,
                pci_address=b.pci_address,
            )
            for b in blockers
        ],
        warnings=[pb.Warning(path=w.path, message=w.message) for w in warnings],
        client_scan=scan_message(client_scan),
    )
    if vfio_scan is not None:
        report.vfio_scan.CopyFrom(scan_message(vfio_scan))
    if trust is not None:
        report.kernel_trust.CopyFrom(trust_message(trust))
    if next_kernel is not None:
        report.next_kernel.CopyFrom(
            pb.NextKernel(release=next_kernel.release, source=next_kernel.source)
        )
    report.observed_at.FromDatetime(now)
    if kernel_tainted is not None:
        report.kernel_tainted = kernel_tainted
    if autoload is not None:
        report.in_tree_autoload.CopyFrom(autoload_message(autoload))
    return report


def autoload_message(autoload: AutoloadFacts) -> pb.InTreeAutoload:
    state = (
        pb.InTreeAutoload.STATE_UNSPECIFIED
        if autoload.state is Autoload.UNKNOWN
        else pb.InTreeAutoload.State.Value(autoload.state.value)
    )
    return pb.InTreeAutoload(state=state, sources=list(autoload.sources))
