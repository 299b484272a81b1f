"""Remedies of the Blocked kinds the cluster's view of a node decides (pure): the node or its
agent unreachable, its pods or claims unknown, pods or claims the drain waited for in vain,
GPU daemons the pause could not take off, another GPUDriver's node, and a node an older
coordinator blocked (gpuctl/rollout/step/checking.py, draining.py, pause.py, writes.py).
"""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.remedies.remedy import (
    AGENT_PODS,
    COORDINATOR_ACCOUNT,
    LEADER_LOG,
    NAMESPACE,
    NODE_PODS,
    NODE_REASON,
    SKIP,
    STATUS,
    Remedy,
    annotation,
)

READY = f"{names.DRIVER_READY_LABEL}={names.DRIVER_READY_VALUE}"

NODE_BLOCKS = {
    BlockKind.NODE_NOT_READY: Remedy(
        summary="the node is NotReady: bring its kubelet back; it is checked again by itself",
        means=(
            "The node's Ready condition is not True (its kubelet is down or cannot reach the "
            "API server), so the rollout does not start it: it is not cordoned, and KMM keeps "
            "the driver it has loaded."
        ),
        confirm=(
            "kubectl get node NODE",
            "kubectl describe node NODE  # Conditions and Taints",
        ),
        fix=(
            "Bring the kubelet (or the node) back. Once the node is Ready the Blocked node is "
            "checked again and goes on by itself. A node that stays down still counts against "
            "`rollout.maxUnavailable`; to let the rest of the fleet go on without it, opt it "
            f"out: `{SKIP}`."
        ),
    ),
    BlockKind.AGENT_UNREACHABLE: Remedy(
        summary="no fresh report from the node's gpuctl agent: get it running and connected",
        means=(
            "The coordinator got no fresh report from the node's gpuctl agent within "
            "`rollout.timeouts.check` (the agent is not running, not connected, or silent), "
            "and what it cannot see it never takes for idle."
        ),
        confirm=(
            "gpuctl nodes  # is the node's agent connected, how old is its report",
            "kubectl get gpunode NODE -o wide  # Session, Fresh and why",
            AGENT_PODS,
            f"kubectl -n {NAMESPACE} describe daemonset gpuctl-agent  # Pods refused or not made",
        ),
        fix=(
            "Get the agent's Pod running on the node (the DaemonSet's node selector and "
            "tolerations, its image, Pod Security admission: docs/deploying.md) and connected "
            f"to the coordinator (TLS, a NetworkPolicy; its log says why: `kubectl -n "
            f"{NAMESPACE} logs POD`). The Blocked node asks its agent again every 30 s and goes "
            "on once a fresh report shows nothing holds the GPU."
        ),
    ),
    BlockKind.PODS_UNKNOWN: Remedy(
        summary="the coordinator could not list the node's pods: check its API access and log",
        means=(
            "The coordinator could not list the node's pods within `rollout.timeouts.check`, "
            "so it cannot tell which GPU pods run there."
        ),
        confirm=(
            NODE_PODS,
            f"kubectl auth can-i list pods --all-namespaces --as={COORDINATOR_ACCOUNT}",
            LEADER_LOG,
        ),
        fix=(
            "Restore the coordinator's access to the API server (the API server's health, the "
            "chart's RBAC for the coordinator). The node goes on by itself once its pods are "
            "listed."
        ),
    ),
    BlockKind.GPU_PODS: Remedy(
        summary="GPU pods outlasted the drain: end or move them, or set rollout.evictGPUPods",
        means=(
            "GPU pods (pods asking for `rollout.gpuResources`, `gpu.intel.com/*` by default, or "
            "matching `rollout.drain.podSelector`) were still on the node when "
            "`rollout.timeouts.drain` ran out; nothing was unloaded."
        ),
        confirm=(
            f"{STATUS}  # the pods named",
            NODE_PODS,
            "kubectl get poddisruptionbudgets -A  # one that refuses the eviction",
        ),
        fix=(
            "Let the pods finish, or delete or move them yourself; or set "
            "`rollout.evictGPUPods: true` so the rollout evicts them (PodDisruptionBudgets are "
            "respected), with a `rollout.timeouts.drain` long enough for them (`0s`: no limit). "
            "The node is checked again by itself and goes on once they are gone."
        ),
    ),
    BlockKind.PAUSED_PODS: Remedy(
        summary="paused GPU daemon pods did not leave the node: find out why, or drain them",
        means=(
            "Pods the GPUDriver pauses (`rollout.pause`) stayed on the node past "
            f"`rollout.timeouts.drain` with `{READY}` off: their own spec selects on it but "
            "nothing deleted them, or they match `rollout.pause.podSelector` without being a "
            "DaemonSet's."
        ),
        confirm=(
            f"{STATUS}  # the pods named, with their owners",
            NODE_PODS,
            "kubectl -n NS describe pod POD  # its owner, and whether it is stuck terminating",
        ),
        fix=(
            "For a DaemonSet's pod, find why its controller did not delete it (the "
            "kube-controller-manager down, the pod stuck terminating). A pod no DaemonSet owns "
            "is deleted by nobody when the label goes: drain it with the GPU pods instead "
            "(`rollout.drain.podSelector`, with `rollout.evictGPUPods`), or take it out of "
            "`rollout.pause.podSelector`. The node is released meanwhile and tried again by "
            "itself."
        ),
    ),
    BlockKind.PAUSE_NOT_SELECTING: Remedy(
        summary=(
            f"a DaemonSet in rollout.pause does not select on {names.DRIVER_READY_LABEL}: fix "
            "its pod template"
        ),
        means=(
            "A DaemonSet declared in `rollout.pause` kept its pod on the node after "
            f"`{names.DRIVER_READY_LABEL}` went off: it does not select on that label, so the "
            "pause can never take its pod off."
        ),
        confirm=(
            f"{STATUS}  # the pod and its DaemonSet named",
            annotation(names.PAUSE_NOT_SELECTING) + "  # the DaemonSet and its revision",
            "kubectl -n NS get daemonset DS -o jsonpath='{.spec.template.spec.nodeSelector}'",
        ),
        fix=(
            "Add `nodeSelector: {" + names.DRIVER_READY_LABEL + ': "true"}` (or a required node '
            "affinity term on that label) to the DaemonSet's pod template, or take the "
            "DaemonSet out of `rollout.pause` (docs/gpu-daemons.md). Its pod of the new "
            "revision replaces the old one and the node starts again by itself; a retry "
            "without that change only blocks it again at the next drain timeout."
        ),
    ),
    BlockKind.GPU_CLAIMS: Remedy(
        summary="GPU ResourceClaims are still allocated on the node: end the pods holding them",
        means=(
            "GPU ResourceClaims (DRA, `gpu.intel.com`) were still allocated on the node when "
            "`rollout.timeouts.drain` ran out: a workload still has the GPU."
        ),
        confirm=(
            f"{STATUS}  # the claims named",
            "kubectl get resourceclaims -A",
            "kubectl -n NS get resourceclaim CLAIM -o yaml  # status.allocation, reservedFor",
        ),
        fix=(
            "End or move the pods that reserve the claims (a claim made from a "
            "ResourceClaimTemplate goes with its pod) and delete standalone claims nobody "
            "needs. The node is checked again by itself once none is allocated there."
        ),
    ),
    BlockKind.CLAIMS_UNKNOWN: Remedy(
        summary="the coordinator cannot read GPU ResourceClaims: check resource.k8s.io and RBAC",
        means=(
            "The coordinator cannot tell whether GPU ResourceClaims are allocated on the node "
            "(not listed yet, not served while discovery says DRA is, or their list or watch "
            "failed), and unknown is never read as none."
        ),
        confirm=(
            f"{STATUS}  # the reason says what failed",
            "kubectl api-resources --api-group=resource.k8s.io",
            "kubectl auth can-i list resourceclaims.resource.k8s.io --all-namespaces "
            f"--as={COORDINATOR_ACCOUNT}",
        ),
        fix=(
            "Restore the `resource.k8s.io` API (DRA on the API server, in a version it serves) "
            "and the coordinator's RBAC on resourceclaims. The node goes on by itself once the "
            "claims are read."
        ),
    ),
    BlockKind.FOREIGN_TARGET: Remedy(
        summary="another GPUDriver targets the node: take it out of one GPUDriver's selector",
        means=(
            f"The node carries another GPUDriver's `{names.TARGET_LABEL}` label: that "
            "GPUDriver's Module loads the driver there, and a node has one driver."
        ),
        confirm=(
            f"kubectl get node NODE -L {names.TARGET_LABEL}",
            "kubectl get gpudriver OTHER -o jsonpath='{.spec.nodeSelector}'",
        ),
        fix=(
            "Take the node out of the other GPUDriver's `nodeSelector` (its rollout unloads it "
            "through the same checks and removes its label), or out of this one's. Do not take "
            "the label off by hand: KMM would unload the driver at once, busy or not."
        ),
    ),
    BlockKind.UNRECORDED: Remedy(
        summary=(
            "blocked by an older coordinator: read its reason, or "
            "`gpuctl rollout retry --node NODE`"
        ),
        means=(
            "The node is Blocked without a kind this build knows: an older coordinator "
            "blocked it, or the kind's annotation was taken off."
        ),
        confirm=(
            NODE_REASON,
            "gpuctl version  # the CLI's, the coordinator's and the agents' versions",
        ),
        fix=(
            "Find the reason's words among the kinds on this page, or have the running "
            "coordinator check the node again and record a kind: "
            "`gpuctl rollout retry --node NODE`, then `gpuctl node inspect NODE` shows it."
        ),
    ),
}
