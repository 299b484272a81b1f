"""Which taints keep KMM from a node, as KMM decides it (pure).

KMM targets a node only while every NoSchedule and NoExecute taint on it is tolerated by the
Module's tolerations (internal/node/node.go IsNodeSchedulable, with Kubernetes'
Toleration.ToleratesTaint); a node that gets an untolerated taint, or whose Module stops
tolerating one it carries, is unloaded at once, busy or not. So gpuctl counts the Module's
tolerations as part of which nodes a GPUDriver wants (gpuctl.gpudriver.targeting): narrowing them
is a per-node change, rolled node by node through the checks like a selector change, and the
Module keeps its old tolerations until the nodes it would drop are unloaded.

The Module's tolerations are built here too, so the coordinator's Module and both callers of
targeting agree: every taint tolerated, then the user's; or, with `tolerateAllTaints: false`,
the user's and the cordon taint's (the rollout cordons nodes; the node lifecycle controller
then taints them `node.kubernetes.io/unschedulable:NoSchedule`).
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


def module_tolerations(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Module's tolerations for a GPUDriver spec."""
    user = [dict(t) for t in copy.deepcopy(list(spec.get("tolerations") or []))]
    if spec.get("tolerateAllTaints", True):
        return [dict(TOLERATE_EVERY_TAINT), *(t for t in user if t != TOLERATE_EVERY_TAINT)]
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
