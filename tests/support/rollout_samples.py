"""Plain-data builders for the rollout's unit tests: Nodes, reports, agent answers, inputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.input.facts import (
    INSPECT,
    PREPARE,
    RESTORE,
    BlockerFact,
    CallState,
    GpuPod,
    KmmLabels,
    NodeFacts,
    PrepareFacts,
    ReportFacts,
    RestoreFacts,
    RolloutInput,
)
from gpuctl.rollout.input.settings import RolloutSettings

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
# The user's kernelModule.version (what the loaded module's backport tag shows) and the
# Module's KMM version the rollout targets (the version plus a digest of the node config).
MODULE_VERSION = "v7.1.4.6_260728.7"
TARGET = f"{MODULE_VERSION}-0a1b2c3d"
OLD_MODULE_VERSION = "v6.17.13.62_260409.8"
OLD = f"{OLD_MODULE_VERSION}-9f8e7d6c"
NONE = names.REMOVAL_VERSION
DRIVER = "gpu"
KMM = KmmLabels(
    version="kmm.node.kubernetes.io/version-module.ns.gpu-gpu",
    ready="kmm.node.kubernetes.io/ns.gpu-gpu.ready",
    version_ready="kmm.node.kubernetes.io/ns.gpu-gpu.version.ready",
)
PF = "0000:03:00.0"


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


NOT_ENFORCING = report_pb.KernelTrust(
    secure_boot=report_pb.KernelTrust.SECURE_BOOT_NOT_EFI,
    lockdown=report_pb.KernelTrust.LOCKDOWN_NONE,
    sig_enforce=report_pb.KernelTrust.SIG_ENFORCE_OFF,
    signatures=report_pb.KernelTrust.SIGNATURES_NOT_ENFORCED,
)


def raw_node(
    name: str, phase: str | None, driver: str = "gpu", version: str = "v1"
) -> dict[str, Any]:
    """A Node object as the API server returns it, in `driver`'s step `phase` about `version`."""
    labels = {names.STATE_LABEL: phase} if phase else {}
    annotations = {names.GPUDRIVER: driver, names.STATE_VERSION: version}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def report_proto(
    blockers: Sequence[BlockerFact] = (),
    *,
    holders: Sequence[str] = (),
    vf_driver: str = "xe",
    vf_count: int = 2,
) -> report_pb.NodeReport:
    """The NodeReport the unload rule reads: xe held by `holders`, with `blockers`; the PF of
    each ACTIVE_VFS blocker has `vf_count` idle VFs bound to `vf_driver`."""
    proto = report_pb.NodeReport(module=report_pb.Module(name="xe", holders=list(holders)))
    # A BIOS node that loads any module: the signature preflight (which blocks on unknown)
    # passes; the preflight's own tests set the node's kernel trust.
    proto.kernel_trust.CopyFrom(NOT_ENFORCING)
    for blocker in blockers:
        proto.blockers.add(
            reason=report_pb.Blocker.Reason.Value(blocker.reason),
            message=blocker.message,
            pci_address=blocker.pci_address,
        )
        if blocker.reason == "ACTIVE_VFS":
            _add_pf_with_vfs(proto, blocker.pci_address, vf_driver, vf_count)
    return proto


def _add_pf_with_vfs(proto: report_pb.NodeReport, pf: str, vf_driver: str, count: int) -> None:
    vfs = [f"{pf[:-1]}{i + 1}" for i in range(count)]
    listed = [report_pb.VirtualFunction(pci_address=vf, driver=vf_driver) for vf in vfs]
    sriov = report_pb.Sriov(num_vfs=count, vfs=listed)
    proto.devices.add(pci_address=pf, driver="xe", role=report_pb.Device.PHYSICAL, sriov=sriov)
    for vf in vfs:
        proto.devices.add(
            pci_address=vf, driver=vf_driver, role=report_pb.Device.VIRTUAL, physfn=pf
        )


def report(
    *,
    state: str = "LIVE",
    tag: str = "xeb_" + OLD_MODULE_VERSION,
    srcversion: str = "OLDSRC",
    drivers: Mapping[str, str] | None = None,
    vfs: Mapping[str, int] | None = None,
    blockers: Sequence[BlockerFact] = (),
    vf_driver: str = "xe",
    holders: Sequence[str] = (),
) -> ReportFacts:
    return ReportFacts(
        module_state=state,
        module_version="backported ...",
        srcversion=srcversion,
        backport_tag=tag,
        drivers=dict(drivers if drivers is not None else {PF: "xe"}),
        vfs=dict(vfs or {}),
        report=report_proto(blockers, holders=holders, vf_driver=vf_driver),
    )


def new_report(**overrides: Any) -> ReportFacts:
    values: dict[str, Any] = {"tag": "xeb_" + MODULE_VERSION, "srcversion": "NEWSRC"}
    values.update(overrides)
    return report(**values)


OPEN_CLIENT = BlockerFact(
    "OPEN_CLIENTS", "1 process holds 0000:03:00.0 open: pid 4242 (ollama)", PF
)
ACTIVE_VFS = BlockerFact("ACTIVE_VFS", "0000:03:00.0 has 2 VFs enabled", PF)
HELD = BlockerFact("MODULE_HOLDERS", "xe is held by xe_compat: unload it first")


def node(
    name: str = "n1",
    *,
    phase: Phase | None = None,
    since: float = 5,
    version: str | None = TARGET,
    reason: str = "",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    pods: Sequence[GpuPod] | None = (),
    claims: Sequence[str] = (),
    wanted: bool = True,
    claims_unknown: str = "",
    image_state: str = "Exists",
) -> NodeFacts:
    """A node as the rollout sees it; KMM has found the target's image (`image_state`)."""
    all_labels = dict(labels or {})
    all_annotations = dict(annotations or {})
    if phase is not None:
        all_labels[names.STATE_LABEL] = phase.value
        all_annotations.setdefault(names.SINCE, ago(since))
        if version is not None:
            all_annotations.setdefault(names.STATE_VERSION, version)
        if reason:
            all_annotations[names.REASON] = reason
    return NodeFacts(
        name=name,
        resource_version="7",
        labels=all_labels,
        annotations=all_annotations,
        unschedulable=unschedulable,
        ready=ready,
        gpu_pods=None if pods is None else tuple(pods),
        claims=tuple(claims),
        wanted=wanted,
        claims_unknown=claims_unknown,
        image_state=image_state,
    )


def answered(
    facts: NodeFacts,
    kind: str = INSPECT,
    *,
    report: ReportFacts | None = None,
    prepare: PrepareFacts | None = None,
    restore: RestoreFacts | None = None,
    error: str = "",
    finished_ago: float = 0.0,
) -> NodeFacts:
    """`facts` with an answered (or failed) agent request of `kind` for its current step."""
    state = CallState(
        kind=kind,
        attempt=facts.attempt,
        started_at=NOW.timestamp() - finished_ago - 0.1,
        finished_at=NOW.timestamp() - finished_ago,
        error=error,
        report=report,
        prepare=prepare,
        restore=restore,
    )
    return dataclasses.replace(facts, calls={**facts.calls, kind: state})


def in_flight(facts: NodeFacts, kind: str = INSPECT) -> NodeFacts:
    state = CallState(kind=kind, attempt=facts.attempt, started_at=NOW.timestamp() - 0.1)
    return dataclasses.replace(facts, calls={**facts.calls, kind: state})


def prepared(
    *,
    ready: bool = True,
    blockers: Sequence[BlockerFact] = (),
    changes: Sequence[agent_pb.NodeChange] = (),
    error: str = "",
    after: ReportFacts | None = None,
) -> PrepareFacts:
    return PrepareFacts(ready, tuple(blockers), tuple(changes), error, after)


def disabled_vfs(pf: str = PF, count: int = 2) -> agent_pb.NodeChange:
    return agent_pb.NodeChange(disabled_vfs=agent_pb.DisabledVfs(pci_address=pf, num_vfs=count))


def targeted(version: str = TARGET) -> dict[str, str]:
    """The labels of the rollout's KMM write: targeted at `version`."""
    return {names.TARGET_LABEL: DRIVER, KMM.version: version}


def loaded_labels(version: str = TARGET) -> dict[str, str]:
    """Targeted at `version`, and KMM reports it loaded."""
    return {**targeted(version), KMM.ready: "", KMM.version_ready: version}


def rollout(
    nodes: Sequence[NodeFacts],
    *,
    settings: RolloutSettings | None = None,
    target: str | None = TARGET,
    module_ready: bool = True,
    resumed: str = "",
    previous: Mapping[str, Any] | None = None,
    now: datetime = NOW,
    unloaded_with: Sequence[str] = (),
    module_version: str = MODULE_VERSION,
    revisions: Sequence[Mapping[str, Any]] = (),
    kernel_module: Mapping[str, Any] | None = None,
    rollback: Mapping[str, Any] | None = None,
) -> RolloutInput:
    return RolloutInput(
        driver_name=DRIVER,
        target_version=target,
        settings=settings or RolloutSettings(hold_after_first_node=False),
        module_driver="xe",
        kmm=KMM,
        module_ready=module_ready,
        module_wait_reason="" if module_ready else "waiting for the Module to be recreated",
        resumed_version=resumed,
        nodes=list(nodes),
        now=now,
        previous_status=dict(previous or {}),
        unloaded_with=tuple(unloaded_with),
        module_version=module_version,
        revisions=list(revisions),
        kernel_module=dict(kernel_module or {}),
        rollback=dict(rollback or {}),
    )


__all__ = ["PREPARE", "RESTORE"]
