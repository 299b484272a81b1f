"""Every name gpuctl defines in the Kubernetes API, in one place (a public contract).

Group, versions, kinds and plurals of our resources; the GPUNode's Fresh condition; the labels,
annotations and finalizer the coordinator writes; the rollout's node phases; and the KMM names
we read and write. The coordinator, the CLI and the tests import them from here and never
restate them: admins, `kubectl` and `gpuctl rollout status|retry` read and write these words,
so they are fixed.
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "gpuctl.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

GPUDRIVER_KIND = "GPUDriver"
GPUDRIVER_PLURAL = "gpudrivers"
GPUDRIVER_SINGULAR = "gpudriver"
GPUDRIVER_SHORT_NAMES = ("gpud",)
GPUDRIVERS = f"{GPUDRIVER_PLURAL}.{GROUP}"

GPUNODE_KIND = "GPUNode"
GPUNODE_PLURAL = "gpunodes"
GPUNODE_SINGULAR = "gpunode"
GPUNODE_SHORT_NAMES = ("gpun",)
GPUNODES = f"{GPUNODE_PLURAL}.{GROUP}"
# GPUNode status.conditions[type=Fresh]: whether the coordinator counts the node's report now
# (the agent was heard from within the freshness bound and the report is its latest). The
# reason says why not; status.unloadBlockers then says UNKNOWN_BLOCKERS.
GPUNODE_FRESH = "Fresh"
UNKNOWN_BLOCKERS = "unknown"


class FreshReason(StrEnum):
    AGENT_HEARD = "AgentHeard"  # fresh
    NO_REPORT = "NoReport"  # no report from the agent since this coordinator started
    REPORT_SUPERSEDED = "ReportSuperseded"  # the agent sent a report the coordinator lacks
    NO_HEARTBEAT = "NoHeartbeat"  # the agent was silent for longer than the bound


# On the KMM Module: which GPUDriver it belongs to.
DRIVER_LABEL = f"{GROUP}/gpudriver"
# On a Node, value = the GPUDriver's name: the KMM Module selects exactly the nodes carrying it,
# and only gpuctl writes it: the rollout (set in the load step, removed in the unload step),
# and the drivers reconciler while it migrates a Module an older gpuctl wrote (onto the nodes
# that Module loaded already, so KMM keeps them). KMM loads or unloads a node only after
# gpuctl decided, for that node, that it may.
TARGET_LABEL = f"{GROUP}/driver-target"
# On the GPUDriver: held until no node's driver would be unloaded while in use.
FINALIZER = f"{GROUP}/unload-guard"
# On a gpuctl KMM Module, set by an admin: the deliberate way out when the coordinator is gone
# for good. The Module delete guard (a ValidatingAdmissionPolicy,
# coordinator/policies/module_guard.py) refuses every DELETE of a gpuctl Module except the
# coordinator's, unless the Module carries this annotation with a non-empty value (the reason,
# recorded in the audit log). Deleting a Module makes KMM unload it on every node at once, busy or
# not.
ALLOW_DELETE_ANNOTATION = f"{GROUP}/allow-delete"
# The audit annotation key (under the policy's name) that records that reason.
ALLOW_DELETE_AUDIT_KEY = "allow-delete-reason"
# Likewise for a change to a gpuctl Module's spec by anyone but the coordinator (KMM reloads
# every node at that version on it): refused unless the Module already carries this, with the
# reason; the coordinator still writes its own spec back once it runs.
ALLOW_EDIT_ANNOTATION = f"{GROUP}/allow-edit"
ALLOW_EDIT_AUDIT_KEY = "allow-edit-reason"
# Likewise, on a Node, for moving it out of a shard's pool (docs/deploying.md#sharding) while
# that shard's rollout is mid-step on it or its GPUDriver has it loaded (coordinator/
# pool_guard.py): no release could then finish the step, nor unload it through its checks.
ALLOW_POOL_MOVE_ANNOTATION = f"{GROUP}/allow-pool-move"
ALLOW_POOL_MOVE_AUDIT_KEY = "allow-pool-move-reason"
# On the coordinator Pod that serves gRPC; the chart's Service selects it.
SERVING_LABEL = f"{GROUP}/grpc-serving"
# The audience of the agents' projected service-account tokens.
AGENT_AUDIENCE = f"{GROUP}/agent"

# KMM's API, as gpuctl uses it.
# The label KMM puts on its worker Pods (Load or Unload): the chart's worker hold guard
# (coordinator/policies/worker_hold_guard.py) and the rollout
# (gpuctl/rollout/input/kmm_activity.py).
KMM_WORKER_ACTION_LABEL = "kmm.node.kubernetes.io/worker-action"
KMM_GROUP = "kmm.sigs.x-k8s.io"
KMM_VERSION = "v1beta1"
KMM_MODULE_PLURAL = "modules"
KMM_MODULES = f"{KMM_MODULE_PLURAL}.{KMM_GROUP}"
# KMM's record of each Module's images and whether they exist (one per Module, same name).
KMM_IMAGES_CONFIG_PLURAL = "moduleimagesconfigs"
# KMM's per-node record (cluster-scoped, named after the node): what to load, what is loaded.
KMM_NODE_CONFIG_PLURAL = "nodemodulesconfigs"
# KMM's check of every Module against a kernel (cluster-scoped): `gpuctl preflight`.
KMM_PREFLIGHT_VERSION = "v1beta2"
KMM_PREFLIGHT_PLURAL = "preflightvalidations"
# The label KMM puts on an image pull Pod: the ModuleImagesConfig it pulls for.
KMM_IMAGE_OWNER_LABEL = "kmm.node.kubernetes.io/image-owner"
# ModuleImagesConfig KMM makes for a Module's PreflightValidation check: "<module>-preflight".
KMM_PREFLIGHT_SUFFIX = "-preflight"


def kmm_version_label(namespace: str, module: str) -> str:
    """KMM's node label naming the `version` of Module <namespace>/<module> the node may run
    (its ordered upgrade): the rollout writes it in the Loading write, with TARGET_LABEL."""
    return f"kmm.node.kubernetes.io/version-module.{namespace}.{module}"


# The rollout's state on each Node: the label holds the phase, annotations hold the detail.
STATE_LABEL = f"{GROUP}/driver-state"
# A node carrying this label with value "skip" is never labelled by the rollout.
OPT_OUT_LABEL = f"{GROUP}/rollout"
OPT_OUT_VALUE = "skip"

SINCE = f"{GROUP}/driver-state-since"
REASON = f"{GROUP}/driver-state-reason"
# On a Blocked node: the kind of its reason (gpuctl.rollout.reasons.BlockKind), which the metrics
# and programs read; the reason above says it in words.
REASON_KIND = f"{GROUP}/driver-state-reason-kind"
# The version the node's phase is about: the Module's KMM version the node is being taken to,
# or REMOVAL_VERSION on the removal path (the driver is being taken off the node).
STATE_VERSION = f"{GROUP}/driver-state-version"
REMOVAL_VERSION = "none"
GPUDRIVER = f"{GROUP}/driver-state-gpudriver"
CORDONED_BY_GPUCTL = f"{GROUP}/cordoned-by-gpuctl"
PREPARE_CHANGES = f"{GROUP}/prepare-changes"
BOUND_BEFORE = f"{GROUP}/bound-before"
# Beyond the contract's list: what a restore and a srcversion check need if the coordinator
# is killed between the agent's answer and the write that records it.
VFS_BEFORE = f"{GROUP}/vfs-before"
SRCVERSION_BEFORE = f"{GROUP}/srcversion-before"
# The image the Module's kernel mapping gives the node at the version of its last KMM write,
# and the one it had before this pass: a reload of the same image (a config-only change such
# as `parameters`) keeps the module's srcversion, so srcversion verification accepts it.
DRIVER_IMAGE = f"{GROUP}/driver-image"
IMAGE_BEFORE = f"{GROUP}/driver-image-before"

# On a Blocked node whose devices were opened after the check, before KMM's worker ran (the
# version of its KMM write): KMM's worker is held off the node (coordinator/rollout/
# worker_hold.py): the node is listed in names.KMM_WORKER_HOLDS, which the chart's worker hold
# guard reads.
# Dropped by the node's next KMM write (which lets the hold go first) or when it leaves.
KMM_WORKER_HELD = f"{GROUP}/kmm-worker-held"
# On a node whose KMM write let such a hold go: while KMM has made no worker for it, KMM is
# nudged now and then (its retries of the refused Pod may be backing off for minutes).
KMM_WORKER_RELEASED = f"{GROUP}/kmm-worker-released"
# On the coordinator's namespace: the nodes KMM's worker is held off, space-separated (the
# chart's worker hold guard, coordinator/policies/worker_hold_guard.py, reads it as
# namespaceObject).
KMM_WORKER_HOLDS = f"{GROUP}/kmm-worker-holds"
# On KMM's NodeModulesConfig: when gpuctl last nudged KMM to reconcile it (any change does).
KMM_NUDGED_AT = f"{GROUP}/nudged-at"

# On the GPUDriver: `gpuctl rollout resume` sets it to the target version to release the hold.
RESUMED_VERSION = f"{GROUP}/rollout-resumed-version"
# On the GPUDriver: the coordinator's record of a rollback (onNodeFailure: Rollback), JSON
# {from, to, revision, nodes, reason}: while the target is `to`, only those nodes start until
# `gpuctl rollout resume` (gpuctl.gpudriver.revisions).
ROLLBACK = f"{GROUP}/rollout-rollback"
# On the coordinator's leader-election Lease: the gpuctl version of the replica holding it
# (`gpuctl version` reads it).
COORDINATOR_VERSION = f"{GROUP}/coordinator-version"
# That Lease's name when not told otherwise (the chart's, for release "gpuctl").
DEFAULT_COORDINATOR_LEASE = "gpuctl-coordinator"

# On a Node verified at the target while the rollout soaks (spec.rollout.soakSeconds): what
# it looked like when verified (gpuctl/rollout/fleet/soak.py); dropped once its soak passed.
SOAK_BASELINE = f"{GROUP}/soak-baseline"

# On a Node Done: the boot it was verified in, JSON {"bootID", "kernel"} from the Node's
# status.nodeInfo (gpuctl/rollout/step/reboots.py). A Done node whose bootID differs rebooted:
# it is verified again before it counts as Done.
VERIFIED_BOOT = f"{GROUP}/verified-boot"
# On a node Verifying (or Failed) after a reboot: the boot it left and the one it came back
# in, in words; the verification then asks for the module verified before the reboot.
REBOOTED = f"{GROUP}/rebooted"
# On a node whose reboot the rollout took up, in whatever phase: that boot, JSON as
# VERIFIED_BOOT. A node KMM loads for this GPUDriver whose bootID differs from this (or, when
# there is none, from VERIFIED_BOOT) rebooted again. Dropped with the next Done.
REBOOT_TAKEN_UP = f"{GROUP}/reboot-taken-up"

# On a Node, value DRIVER_READY_VALUE: this GPUDriver's driver is loaded there and verified by
# the rollout. The one label a GPU DaemonSet (device plugin, DRA kubelet plugin, XPU Manager,
# exporters) or a GPU workload selects on (docs/gpu-daemons.md). The rollout takes it off in
# the write that starts a node's step (the cordon): the daemons' pods leave the node before
# anything is unloaded (the pause), nothing new starts on the driver being replaced; and puts
# it back in the write that ends a verified step. A node whose step ends without a change
# (Blocked before anything was unloaded) gets it back as it had it; a Failed, rebooted or
# removed node stays without it. KMM's own ready label stays on until KMM unloads, which is
# too late for a clean pause.
DRIVER_READY_LABEL = f"{GROUP}/driver-ready"
DRIVER_READY_VALUE = "true"
# On a node whose step took DRIVER_READY_LABEL off: JSON {"readyBefore", "owners", "evict"}
# (gpuctl/rollout/step/pause.py): whether it had the label, the controllers of the paused pods
# that must come back after the load ("DaemonSet monitoring/xpumanager"), and the pods holding
# the GPU that are drained with the GPU pods.
PAUSED_CLIENTS = f"{GROUP}/paused-gpu-clients"
# On a verified node waiting for its paused pods to come back: when the label was put back.
CLIENTS_RESUMED_AT = f"{GROUP}/gpu-clients-resumed-at"
# On a node Blocked because a declared DaemonSet's pod stayed on it with DRIVER_READY_LABEL off
# (the DaemonSet does not select on it): JSON list of "namespace/name@revision" (its pods'
# controller-revision-hash). The node stays Blocked while a pod of such a revision is on it
# (gpuctl/rollout/step/pause.py); dropped when it leaves Blocked.
PAUSE_NOT_SELECTING = f"{GROUP}/pause-not-selecting"

# On a node started while its GPU served nothing (gpuctl/rollout/input/driverless.py): the boot
# whose agent report showed no xe loaded and every GPU function unbound. Such a node starts
# without waiting for a maxUnavailable slot (it had no capacity to take away); dropped once it
# is done.
STARTED_DRIVERLESS = f"{GROUP}/started-driverless"

# The cluster autoscaler's own annotation: it never scales down a node that carries it with
# "true" (its FAQ, "How can I prevent Cluster Autoscaler from scaling down a particular
# node?"). gpuctl sets it on a node for its step (gpuctl/rollout/step/autoscaler.py) and says so
# with SCALE_DOWN_DISABLED_BY_GPUCTL, so that it takes off only what it set, never an admin's.
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SCALE_DOWN_DISABLED_BY_GPUCTL = f"{GROUP}/scale-down-disabled-by-gpuctl"

# Annotations that describe one node's pass and are dropped once it is done.
PASS_DETAIL = (
    PREPARE_CHANGES,
    BOUND_BEFORE,
    VFS_BEFORE,
    SRCVERSION_BEFORE,
    IMAGE_BEFORE,
    KMM_WORKER_RELEASED,
    REBOOTED,
    PAUSED_CLIENTS,
    CLIENTS_RESUMED_AT,
    STARTED_DRIVERLESS,
)
# Every annotation of a node's rollout state, dropped when the node leaves the rollout.
STATE_ANNOTATIONS = (
    SINCE,
    REASON,
    REASON_KIND,
    STATE_VERSION,
    GPUDRIVER,
    CORDONED_BY_GPUCTL,
    SOAK_BASELINE,
    KMM_WORKER_HELD,
    VERIFIED_BOOT,
    REBOOT_TAKEN_UP,
    PAUSE_NOT_SELECTING,
    SCALE_DOWN_DISABLED_BY_GPUCTL,
    *PASS_DETAIL,
)


class Phase(StrEnum):
    """A node's place in the rollout. On the removal path (STATE_VERSION = REMOVAL_VERSION)
    the same phases take the driver off: Loading is then KMM unloading it, Verifying checks
    it is gone, and the phase label is removed at the end (there is no Done)."""

    PENDING = "Pending"
    CHECKING = "Checking"
    DRAINING = "Draining"
    PREPARING = "Preparing"
    LOADING = "Loading"
    VERIFYING = "Verifying"
    DONE = "Done"
    BLOCKED = "Blocked"
    FAILED = "Failed"
    SKIPPED = "Skipped"


# Phases in which a node is being worked on (and counts as unavailable).
IN_PROGRESS = frozenset(
    {Phase.CHECKING, Phase.DRAINING, Phase.PREPARING, Phase.LOADING, Phase.VERIFYING}
)
# status.rollout.nodes order: the worst first.
SEVERITY = (
    Phase.FAILED,
    Phase.BLOCKED,
    Phase.VERIFYING,
    Phase.LOADING,
    Phase.PREPARING,
    Phase.DRAINING,
    Phase.CHECKING,
    Phase.PENDING,
    Phase.SKIPPED,
    Phase.DONE,
)


_PHASES_BY_VALUE = {phase.value: phase for phase in Phase}


def parse_phase(value: str | None) -> Phase | None:
    """The phase a label value names; None for no label or a value that is not a phase."""
    if value is None:
        return None
    return _PHASES_BY_VALUE.get(value)
