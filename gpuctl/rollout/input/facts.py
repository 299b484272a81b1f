"""The facts the rollout decides on, as plain immutable values (no I/O, no clients).

- `ReportFacts`: what one NodeReport says that matters to an unload and to verification;
- `CallState`: the latest agent request of one kind made for a node's current step, and its
  answer (in memory only: after a restart the step asks again);
- `NodeFacts`: one Node (labels, annotations, cordon, Ready), whether the GPUDriver wants its
  driver there, plus its GPU pods, allocated GPU claims (or why they are unknown) and agent
  answers;
- `RolloutInput`: one GPUDriver's target (the Module's KMM version), the version the loaded
  module must show, settings and every node the rollout considers, and the clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.common.names import Phase, parse_phase
from gpuctl.common.unload_rule import (
    UnloadSettings,
    module_state_name,
    provenance_name,
    reason_name,
)
from gpuctl.rollout.input.image_probe import ImageProbe
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rollout.input.prometheus import GateResult
from gpuctl.rollout.input.records import BoundFunction
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.input.signing_key import SigningCertificate
from gpuctl.rollout.reasons import BlockKind, parse_block_kind

INSPECT = "inspect"
# ReportFacts.provenance of the kernel's own module and of one built out of its tree.
IN_TREE = "IN_TREE"
OUT_OF_TREE = "OUT_OF_TREE"
PREPARE = "prepare"
RESTORE = "restore"


@dataclass(frozen=True)
class BlockerFact:
    reason: str  # the NodeReport Blocker.Reason name, e.g. OPEN_CLIENTS
    message: str  # the agent's words: pids and commands, VF addresses
    pci_address: str = ""


@dataclass(frozen=True)
class ReportFacts:
    """One NodeReport, reduced to what the rollout checks."""

    module_state: str
    module_version: str
    srcversion: str
    backport_tag: str
    # Every function present -> its driver ("" when unbound).
    drivers: Mapping[str, str]
    # PF -> sriov_numvfs, where readable.
    vfs: Mapping[str, int]
    # The kernel's taint mask (None: the agent could not read it).
    kernel_tainted: int | None = None
    # The loaded module's Module.Provenance name (IN_TREE, OUT_OF_TREE, UNKNOWN; "" when
    # the report does not say).
    provenance: str = ""
    # The report itself: the unload rule (gpuctl.common.unload_rule) reads its blockers,
    # devices and module holders.
    report: report_pb.NodeReport = field(default_factory=report_pb.NodeReport)

    def bound_to(self, driver: str) -> list[BoundFunction]:
        return sorted(BoundFunction(a, d) for a, d in self.drivers.items() if d == driver)

    def in_survivability(self) -> str:
        """The functions xe holds in survivability mode, in words ("" for none): a load that
        ends there failed, though each is bound. A function whose mode is unknown (an older
        agent) is not counted: the binding and version checks stand for it as before."""
        modes = {
            report_pb.Survivability.BOOT: "Boot",
            report_pb.Survivability.RUNTIME: "Runtime",
            report_pb.Survivability.TYPE_UNKNOWN: "type unknown",
        }
        found = [
            f"{device.pci_address} ({modes[device.survivability.mode]})"
            for device in self.report.devices
            if device.survivability.mode in modes
        ]
        if not found:
            return ""
        return (
            f"in survivability mode: {', '.join(found)}: xe found the GPU's firmware failed; "
            "it serves nothing until the firmware is flashed (docs/agent.md#survivability-mode)"
        )


def _blocker(blocker: report_pb.Blocker) -> BlockerFact:
    reason = reason_name(blocker.reason)
    return BlockerFact(reason, blocker.message or reason, blocker.pci_address)


def report_facts(report: report_pb.NodeReport) -> ReportFacts:
    module = report.module
    vfs = {
        d.pci_address: int(d.sriov.num_vfs)
        for d in report.devices
        if d.HasField("sriov") and d.sriov.HasField("num_vfs")
    }
    return ReportFacts(
        module_state=module_state_name(module.state),
        module_version=module.version,
        srcversion=module.srcversion,
        backport_tag=module.backport_tag,
        drivers={d.pci_address: d.driver for d in report.devices},
        vfs=vfs,
        kernel_tainted=report.kernel_tainted if report.HasField("kernel_tainted") else None,
        provenance=provenance_name(module.provenance),
        report=report,
    )


@dataclass(frozen=True)
class PrepareFacts:
    ready: bool
    blockers: tuple[BlockerFact, ...]
    changes: tuple[agent_pb.NodeChange, ...]
    error: str
    report: ReportFacts | None


def prepare_facts(result: agent_pb.PrepareResult) -> PrepareFacts:
    report = report_facts(result.report) if result.HasField("report") else None
    return PrepareFacts(
        ready=result.ready,
        blockers=tuple(_blocker(b) for b in result.blockers),
        changes=tuple(result.changes),
        error=result.error,
        report=report,
    )


@dataclass(frozen=True)
class RestoreFacts:
    errors: tuple[str, ...]
    report: ReportFacts | None


def restore_facts(result: agent_pb.RestoreResult) -> RestoreFacts:
    report = report_facts(result.report) if result.HasField("report") else None
    return RestoreFacts(errors=tuple(result.errors), report=report)


@dataclass(frozen=True)
class CallState:
    """The latest request of one kind for a node's current step (`attempt`)."""

    kind: str
    attempt: str
    started_at: float
    finished_at: float | None = None
    error: str = ""
    report: ReportFacts | None = None
    prepare: PrepareFacts | None = None
    restore: RestoreFacts | None = None

    @property
    def in_flight(self) -> bool:
        return self.finished_at is None

    @property
    def answered(self) -> bool:
        return self.finished_at is not None and not self.error


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeFacts:
    name: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool
    ready: bool
    # GPU pods on the node (not finished); None when not looked at or the list failed.
    gpu_pods: tuple[GpuPod, ...] | None = None
    # Allocated gpu.intel.com ResourceClaims on the node, as namespace/name.
    claims: tuple[str, ...] = ()
    # Agent requests of the current step by kind (INSPECT, PREPARE, RESTORE).
    calls: Mapping[str, CallState] = field(default_factory=dict)
    # The GPUDriver wants its driver here (gpuctl.gpudriver.targeting); else the rollout takes
    # it off (the removal path) or lets the node go.
    wanted: bool = True
    # Why the claims are not known ("" when `claims` is the truth): a node whose claims are
    # unknown is never unloaded.
    claims_unknown: str = ""
    # The image the GPUDriver's kernel mapping gives this node's kernel now ("" for none).
    target_image: str = ""
    # What KMM's ModuleImagesConfig says of `target_image` ("Exists", "DoesNotExist",
    # "NeedsBuilding", ...; "" while it says nothing).
    image_state: str = ""
    # What KMM's own objects show it doing here (kmm_activity), read for a node in Loading:
    # a step that times out names it. "" when they show nothing worth telling.
    kmm_activity: str = ""
    # KMM's worker Pods of the Module on the node that have not succeeded (nor are being
    # deleted); read for a node whose KMM worker is held or was let go (worker_hold.py).
    unfinished_workers: tuple[str, ...] = ()
    # The Node's status.nodeInfo: its boot id (new at every boot) and kernel ("" unknown).
    boot_id: str = ""
    kernel_version: str = ""
    # The boot KMM's NodeModulesConfig records its loader ran in for this GPUDriver's Module
    # (status.modules[].bootId; "" when it records no load; None when not read).
    kmm_boot_id: str | None = None
    # The kernel KMM's NodeModulesConfig configures its loader of the Module for
    # (spec.modules[].config.kernelVersion; "" none; None when not read).
    kmm_kernel: str | None = None
    # The agent's latest live report, in this boot, shows a GPU with no driver
    # (gpuctl/rollout/input/driverless.py; False when unknown).
    driverless: bool = False
    # Every pod on the node that has not finished, read with `gpu_pods` (() when those are
    # unknown or not looked at): who a GPU client's pod UID is, what is paused or drained.
    pods: tuple[PodFacts, ...] = ()
    # The GPUDriver's image probe Pods on the node (gpuctl/rollout/input/image_probe.py), read for a
    # node in a step or Blocked; None when the Pod watch cannot be trusted now.
    image_probes: tuple[ImageProbe, ...] | None = ()

    # Cached: a 5,000-node pass reads each node's phase dozens of times.
    @cached_property
    def phase(self) -> Phase | None:
        return parse_phase(self.labels.get(names.STATE_LABEL))

    @property
    def since(self) -> str:
        return self.annotations.get(names.SINCE, "")

    @property
    def state_version(self) -> str:
        return self.annotations.get(names.STATE_VERSION, "")

    @property
    def reason(self) -> str:
        return self.annotations.get(names.REASON, "")

    @property
    def reason_kind(self) -> BlockKind:
        """The kind of a Blocked node's reason (UNRECORDED when it has none this build knows)."""
        return parse_block_kind(self.annotations.get(names.REASON_KIND))

    @cached_property
    def attempt(self) -> str:
        """Names the node's current step: agent answers belong to one attempt. A rebooted
        node's verification names its boots too: it may start within the second of the
        node's last verification, whose answers are not about this boot."""
        step = f"{self.labels.get(names.STATE_LABEL, '')}@{self.since}@{self.state_version}"
        rebooted = self.annotations.get(names.REBOOTED)
        return f"{step}@{rebooted}" if rebooted else step

    @property
    def opted_out(self) -> bool:
        return self.labels.get(names.OPT_OUT_LABEL) == names.OPT_OUT_VALUE

    @property
    def cordoned_by_us(self) -> bool:
        return self.annotations.get(names.CORDONED_BY_GPUCTL) == "true"

    @property
    def target_label(self) -> str:
        """The GPUDriver this node is targeted for (names.TARGET_LABEL), "" for none."""
        return self.labels.get(names.TARGET_LABEL, "")

    def call(self, kind: str) -> CallState | None:
        state = self.calls.get(kind)
        return state if state is not None and state.attempt == self.attempt else None


def node_is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_facts(
    node: Mapping[str, Any],
    *,
    gpu_pods: tuple[GpuPod, ...] | None = None,
    claims: tuple[str, ...] = (),
    calls: Mapping[str, CallState] | None = None,
    wanted: bool = True,
    claims_unknown: str = "",
    target_image: str = "",
    image_state: str = "",
    kmm_activity: str = "",
    unfinished_workers: tuple[str, ...] = (),
    pods: tuple[PodFacts, ...] = (),
    image_probes: tuple[ImageProbe, ...] | None = (),
    kmm_boot_id: str | None = None,
    kmm_kernel: str | None = None,
    driverless: bool = False,
) -> NodeFacts:
    meta = node.get("metadata") or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return NodeFacts(
        name=str(meta["name"]),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        ready=node_is_ready(node),
        gpu_pods=gpu_pods,
        claims=claims,
        calls=dict(calls or {}),
        wanted=wanted,
        claims_unknown=claims_unknown,
        target_image=target_image,
        image_state=image_state,
        kmm_activity=kmm_activity,
        unfinished_workers=unfinished_workers,
        boot_id=str(info.get("bootID") or ""),
        kernel_version=str(info.get("kernelVersion") or ""),
        pods=pods,
        image_probes=image_probes,
        kmm_boot_id=kmm_boot_id,
        kmm_kernel=kmm_kernel,
        driverless=driverless,
    )


@dataclass(frozen=True)
class KmmLabels:
    """The node label names of one Module."""

    version: str
    ready: str
    version_ready: str


@dataclass(frozen=True)
class RolloutInput:
    driver_name: str
    # The Module's KMM version (gpuctl.gpudriver.module_spec.kmm_version) wanted nodes are
    # taken to; None when no node is wanted (no kernelModule, or the GPUDriver is deleted).
    target_version: str | None
    settings: RolloutSettings
    module_driver: str
    kmm: KmmLabels
    # The Module exists, is not being deleted and has `version` == target_version.
    module_ready: bool
    module_wait_reason: str
    resumed_version: str
    nodes: Sequence[NodeFacts]
    now: datetime
    previous_status: Mapping[str, Any] = field(default_factory=dict)
    # How long (seconds, monotonic) this coordinator has watched without a gap: leading with
    # its caches unbroken. A step's timeout counts no more than this, so a control-plane
    # outage, a failover or a skewed clock (steps' `since` come from some leader's wall
    # clock) never fails a node for a wait nobody watched.
    observed_for: float = math.inf
    # How often a Blocked node's agent is asked whether the blocker went away.
    blocked_recheck_seconds: float = 30.0
    # The modules KMM unloads after the module: modulesLoadingOrder after its first entry
    # (they only explain a holder's blocker; see gpuctl.common.unload_rule).
    unloaded_with: tuple[str, ...] = ()
    # The user's kernelModule.version: what the loaded module's backport tag must show (""
    # when none is set: then the module must be live with a new srcversion).
    module_version: str = ""
    # status.revisions as read, the spec's kernelModule (recorded with a new revision), and
    # the GPUDriver's rollback record (gpuctl.gpudriver.revisions.read_rollback; {} for none).
    revisions: Sequence[Mapping[str, Any]] = ()
    kernel_module: Mapping[str, Any] = field(default_factory=dict)
    rollback: Mapping[str, Any] = field(default_factory=dict)
    # The Prometheus gate's latest verdict (None: no gate, or not evaluated in this pass).
    gate: GateResult | None = None
    # The certSecrets the spec names, as read, by name (gpuctl/rollout/input/signing_key.py): the
    # key KMM signs the target with, for the preflight on nodes that enforce module signatures.
    signing_certificates: Mapping[str, SigningCertificate] = field(default_factory=dict)
    # Why KMM's ModuleImagesConfig could not be read ("" when it was): unread is not "no
    # image found", and a reload's block says which of the two it is.
    images_unknown: str = ""
    # KMM's worker holds (names.KMM_WORKER_HOLDS) as the namespace last said them, and why
    # they could not be written ("" when they are what the Nodes say: worker_holds.py).
    worker_holds: frozenset[str] = frozenset()
    worker_holds_trouble: str = ""
    # Why kured's reboot lock keeps nodes from starting ("" when it does not: no kured lock
    # configured, nobody holds it, or gpuctl does): the node kured reboots, or why the lock
    # could not be read (unknown is never free). gpuctl/rollout/input/kured_lock.py.
    kured_holder: str = ""
    # The Module's pull secret (imageRepoSecret; "" for none): an image probe pulls with it.
    image_pull_secret: str = ""

    def target_for(self, node: NodeFacts) -> str:
        """The version `node` is taken to: the target, or REMOVAL_VERSION when not wanted."""
        if node.wanted and self.target_version:
            return self.target_version
        return names.REMOVAL_VERSION

    @property
    def unload_settings(self) -> UnloadSettings:
        """What the unload rule counts as cleared before the unload (preparation, KMM)."""
        return UnloadSettings(
            self.module_driver, self.settings.disable_idle_vfs, self.unloaded_with
        )
