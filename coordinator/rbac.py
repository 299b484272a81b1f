"""The Kubernetes permissions the coordinator needs, in one place.

hack/generate.py writes them into the Helm chart (templates/coordinator-rbac.yaml), and an
integration test runs the coordinator under exactly these rules with a ServiceAccount token,
so the chart cannot lack a permission the code uses.
"""

from __future__ import annotations

from typing import Any

from gpuctl.common import names
from gpuctl.common.names import KMM_GROUP
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL

READ = ["get", "list", "watch"]

# Cluster-wide: GPUDrivers (cluster-scoped), Nodes and ResourceClaims (the rollout), Events
# (Events about cluster-scoped objects are filed in the `default` namespace), the GPUNode mirror,
# and the reviews that check agents' and NodeService callers' tokens.
CLUSTER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [names.GROUP],
        "resources": [names.GPUDRIVER_PLURAL],
        "verbs": [*READ, "update", "patch"],
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.GPUDRIVER_PLURAL}/status"],
        "verbs": ["get", "update", "patch"],
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.GPUDRIVER_PLURAL}/finalizers"],
        "verbs": ["update"],
    },
    # The rollout writes its state, cordons, TARGET_LABEL and KMM's version label on Nodes,
    # lists each node's GPU pods, and evicts them when spec.rollout.evictGPUPods allows it;
    # the GPUDriver reconciler lists Nodes by label and writes TARGET_LABEL when it switches an
    # older gpuctl's Module to it.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": [*READ, "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": READ},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {
        "apiGroups": [names.GROUP],
        "resources": [names.GPUNODE_PLURAL],
        "verbs": [*READ, "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.GPUNODE_PLURAL}/status"],
        "verbs": ["get", "update", "patch"],
    },
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
]

# In the coordinator's namespace: the KMM Modules it writes, its leader-election Lease, and its
# own Pod's gRPC serving label (coordinator/live_nodes/serving_label.py).
NAMESPACE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [KMM_GROUP],
        "resources": [KMM_PLURAL],
        "verbs": [*READ, "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]},
]
