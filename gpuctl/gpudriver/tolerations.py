"""Which taints keep a GPUDriver's driver from a node, and the Module's tolerations (pure).

KMM targets a node only while every NoSchedule and NoExecute taint on it is tolerated by the
Module's tolerations (internal/node/node.go IsNodeSchedulable, with Kubernetes'
Toleration.ToleratesTaint, checked in internal/controllers/nmc_reconciler.go on every
reconcile); a node that gets an untolerated taint is unloaded at once, busy or not. So the
Module always tolerates every taint (`module_tolerations`) and KMM never drops a node for one.
Which taints a node may carry and still get the driver is gpuctl's own decision
(`wanted_tolerations`, read by gpuctl.gpudriver.targeting): every taint, or with
`tolerateAllTaints: false` the user's tolerations and the cordon taint's (the rollout cordons
nodes; the node lifecycle controller then taints them
`node.kubernetes.io/unschedulable:NoSchedule`). A node that gains a taint those leave
untolerated, or whose GPUDriver narrows them, leaves the wanted nodes and is unloaded node by
node through the checks, like a node leaving the selector (the world run's seed 6: an admin's
taint on a busy node made KMM try `modprobe -r` at once while the Module tolerated only the
user's list).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# With it, no NoSchedule/NoExecute taint takes a node out of KMM's targets.
TOLERATE_EVERY_TAINT = {"operator": "Exists"}
CORDON_TAINT_KEY = "node.kubernetes.io/unschedulable"
CORDON_TOLERATION = {"key": CORDON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# The effects that take a node out of KMM's targets; PreferNoSchedule does not.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def _users(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in copy.deepcopy(list(spec.get("tolerations") or []))]


def module_tolerations(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Module's tolerations for a GPUDriver spec: every taint, then the user's (KMM hands
    them to its worker and build pods). Never narrower, whatever `tolerateAllTaints` says:
    KMM would unload a node that gets a taint they leave untolerated, busy or not."""
    return [dict(TOLERATE_EVERY_TAINT), *(t for t in _users(spec) if t != TOLERATE_EVERY_TAINT)]


def wanted_tolerations(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The taints a node may carry and still be wanted: every one, or with
    `tolerateAllTaints: false` those the user's tolerations and the cordon toleration tolerate."""
    if spec.get("tolerateAllTaints", True):
        return module_tolerations(spec)
    user = _users(spec)
    if CORDON_TOLERATION not in user:
        user.append(dict(CORDON_TOLERATION))
    return user


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' Toleration.ToleratesTaint: effect and key match where given; `Exists`
    tolerates any value, `Equal` (or no operator) the same value; another operator nothing."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.get("effect"):
        return False
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def untolerated(
    taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The NoSchedule/NoExecute taints none of `tolerations` tolerates: KMM does not target a
    node carrying one."""
    return [
        taint
        for taint in taints
        if taint.get("effect") in BLOCKING_EFFECTS
        and not any(tolerates(t, taint) for t in tolerations)
    ]
