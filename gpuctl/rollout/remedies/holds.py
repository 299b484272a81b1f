"""Remedies of the rollout-wide holds (pure): what keeps new nodes of a GPUDriver's rollout from
starting, as status.rollout.holdKind names it (gpuctl/rollout/fleet/gates.py,
gpuctl/rollout/fleet/pass_holds.py, gpuctl/rollout/place/refused.py). Nodes in a step finish it
under every one of them.
"""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.rollout.reasons import HoldKind
from gpuctl.rollout.remedies.remedy import (
    DESCRIBE_DRIVER,
    NAMESPACE,
    ROLLBACK_RECORD,
    STATUS,
    Remedy,
)

RESUME = "`gpuctl rollout resume NAME`"
HISTORY = "gpuctl rollout history NAME  # the revisions, the current one marked"


def spec(path: str) -> str:
    return f"kubectl get gpudriver NAME -o jsonpath='{{.spec.rollout.{path}}}'"


HOLDS = {
    HoldKind.FAILURE_BUDGET: Remedy(
        summary="too many nodes Failed: fix them, then `gpuctl rollout retry --node NODE` each",
        means=(
            "As many nodes Failed at the target as `rollout.failureBudget` allows: the rollout "
            "is Failed and starts no new node."
        ),
        confirm=(
            f"{STATUS}  # the Failed nodes and why",
            f"kubectl get nodes -l {names.STATE_LABEL}=Failed",
            "gpuctl node inspect NODE  # one Failed node's reason and report",
        ),
        fix=(
            "Find why each node failed (a step timed out, KMM did not load, the module did not "
            "verify, a restore failed), fix it, then `gpuctl rollout retry --node NODE`: a retried "
            "failure no longer counts. To go back instead: `gpuctl rollout undo NAME`."
        ),
    ),
    HoldKind.PAUSED: Remedy(
        summary=f"paused (rollout.paused): {RESUME} to go on",
        means="`spec.rollout.paused` is true: no new node starts.",
        confirm=(spec("paused"),),
        fix=(
            f"{RESUME} (where a GitOps tool applies the GPUDriver, set `paused: false` in Git "
            "instead)."
        ),
    ),
    HoldKind.AFTER_FIRST_NODE: Remedy(
        summary=f"held after the first node: check it, then {RESUME}",
        means=(
            "`rollout.holdAfterFirstNode`: the first node is Done at the target, and the rest "
            "wait until a person has checked it."
        ),
        confirm=(
            STATUS,
            "gpuctl nodes  # the module version of each node",
            "gpuctl node inspect NODE  # the first node: the module live at the target",
        ),
        fix=(
            f"Check the first node (its GPUs, its workloads), then {RESUME} lets the rest go for "
            "this target; to go back instead, `gpuctl rollout undo NAME`."
        ),
    ),
    HoldKind.OUTSIDE_WINDOWS: Remedy(
        summary="outside the maintenance windows: it goes on when the next one opens",
        means=(
            "Every maintenance window (`rollout.maintenanceWindows`) is closed: no node starts "
            "until the next one opens."
        ),
        confirm=(
            f"{STATUS}  # maintenance window: closed, the next opens at ...",
            spec("maintenanceWindows"),
        ),
        fix=(
            "Nothing: the rollout goes on when the next window opens. To roll now, add or "
            "widen a window (`days`, `start`, `duration`, `timeZone`)."
        ),
    ),
    HoldKind.PROMETHEUS_GATE: Remedy(
        summary="the Prometheus gate holds: clear what its query finds, or fix the gate",
        means=(
            "The Prometheus gate's query (`rollout.gates.prometheus`) returned series (an alert "
            "firing) or could not be evaluated (Prometheus unreachable, an HTTP error, a bad "
            "query, a token refused), and unknown is not healthy."
        ),
        confirm=(
            f"{STATUS}  # the series found, or why the gate cannot be evaluated",
            spec("gates.prometheus"),
        ),
        fix=(
            "Clear what the query finds (the firing alert), or fix the gate: its URL and the "
            "coordinator's network access to it (the chart's `networkPolicy.prometheus`), the "
            "query, the token and CA (the chart's `coordinator.prometheus`: "
            "docs/rollout.md#an-authenticated-prometheus). The gate is asked again every 2 s; "
            "nodes start on an empty answer."
        ),
    ),
    HoldKind.KURED_REBOOTING: Remedy(
        summary="kured is rebooting a node (it holds its lock): the rollout goes on after it",
        means=(
            "kured holds its reboot lock (the `weave.works/kured-node-lock` annotation of its "
            "DaemonSet): it is draining or rebooting that node. gpuctl starts no node until "
            "kured lets the lock go, then holds it itself while a node is in a step, so kured "
            "never reboots a node mid-step; a lock that cannot be read holds too."
        ),
        confirm=(
            f"{STATUS}  # kured holds its reboot lock: NODE",
            "kubectl -n kube-system get daemonset kured "
            "-o jsonpath='{.metadata.annotations.weave\\.works/kured-node-lock}'",
        ),
        fix=(
            "Nothing: the rollout goes on once kured's node is back and kured takes its lock "
            "off. A lock left behind by a node that never came back: delete the annotation "
            "(`kubectl -n kube-system annotate daemonset kured weave.works/kured-node-lock-`); "
            "the chart's `kured` values say where kured runs (docs/maintenance.md#kured)."
        ),
    ),
    HoldKind.MODULE_NOT_READY: Remedy(
        summary="KMM's Module does not ask for the target yet: read the GPUDriver's status",
        means=(
            "The KMM Module does not ask for the target yet: it is missing (KMM not installed "
            "or too old, the Module being made again), being deleted, or its update is held "
            "(nodes no new kernel mapping serves are unloaded first, a target label conflict)."
        ),
        confirm=(
            "kubectl get gpudriver NAME -o jsonpath='{.status.errors}'",
            DESCRIBE_DRIVER,
            f"kubectl -n {NAMESPACE} get modules.kmm.sigs.x-k8s.io",
        ),
        fix=(
            "Do what `status.errors` says: install KMM v2.4.0 or later "
            "(docs/gpudriver.md#which-kmm), let the held removals finish (a Blocked one says "
            "why on this page), resolve a target label conflict. Removals go on meanwhile; "
            "loads start once the Module asks for the target."
        ),
    ),
    HoldKind.SOAKING: Remedy(
        summary="nodes at the target soak before the next starts: it goes on by itself",
        means=(
            "The nodes verified at the target are watched for `rollout.soakSeconds` (with "
            "`soakEachBatch`, after every node) before the next node starts."
        ),
        confirm=(f"{STATUS}  # soaking before the next node starts: NODE (42s left)",),
        fix=(
            "Nothing: the rollout goes on once the soak passes on a clean report. A node "
            "degraded meanwhile fails the soak (Failed; rolled back with "
            "`onNodeFailure: Rollback`). To soak less, lower `rollout.soakSeconds`."
        ),
    ),
    HoldKind.ROLLING_BACK: Remedy(
        summary="rolling the failed nodes back to the previous revision: wait, then read why",
        means=(
            "A node failed at the target under `rollout.onNodeFailure: Rollback`: "
            "`spec.kernelModule` was written back to the previous revision, and the failed "
            "nodes are taken back through the same checks while no other node starts."
        ),
        confirm=(ROLLBACK_RECORD, DESCRIBE_DRIVER, HISTORY),
        fix=(
            "Wait: once those nodes are verified back the rollout pauses (`RolledBack`). "
            "Meanwhile find why the target failed (the rollback record's reason, the failed "
            "nodes' Events)."
        ),
    ),
    HoldKind.ROLLED_BACK: Remedy(
        summary=f"rolled back after a failure: fix the cause, then {RESUME}",
        means=(
            "A rollback is done: the failed nodes run the previous revision again, and the "
            "rollout stays paused until a person says to go on."
        ),
        confirm=(STATUS, ROLLBACK_RECORD, HISTORY),
        fix=(
            f"Fix what made the target fail, then {RESUME}: the nodes still at the failed "
            "version are taken back to the revision rolled back to. Roll forward later with "
            "a new `spec.kernelModule`."
        ),
    ),
    HoldKind.ROLLBACK_IN_GIT: Remedy(
        summary=f"a rollback is due in Git: put the named revision back there, or {RESUME}",
        means=(
            "A rollback is due but a GitOps tool (Argo CD, Flux, Fleet) applies "
            "`spec.kernelModule`, so the coordinator did not write it: the rollout is paused "
            "until Git carries the previous revision."
        ),
        confirm=(f"{STATUS}  # the failed nodes and the revision to put back", HISTORY),
        fix=(
            "Put that revision's `kernelModule` back in Git (the rollback then goes on from "
            f"there), or {RESUME} to go on with the failed version instead "
            "(docs/gitops.md#rollback-and-undo)."
        ),
    ),
    HoldKind.REFUSED: Remedy(
        summary="the rollout is refused: fix spec.rollout, or the conflict the message names",
        means=(
            "The rollout cannot be read (`spec.rollout` invalid, a time zone the coordinator "
            "does not know, say) or its GPUDriver conflicts with an older one on the same "
            "nodes: it is Paused and starts no node."
        ),
        confirm=(
            "kubectl get gpudriver NAME -o jsonpath='{.status.rollout.message}'",
            DESCRIBE_DRIVER,
            "kubectl get gpudrivers  # the other GPUDriver of a conflict",
        ),
        fix=(
            "Fix `spec.rollout` as the message says; for a conflict, make the two GPUDrivers' "
            "node selectors disjoint (or delete the newer one). The rollout goes on once "
            "nothing refuses it (docs/gpudriver.md#conflicts)."
        ),
    ),
}
