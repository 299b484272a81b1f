"""The Kubernetes permissions the coordinator needs, and those of people who run gpuctl.

hack/generate.py writes them into the Helm chart (charts/gpuctl/templates/coordinator-rbac.yaml,
charts/gpuctl/templates/user-rbac.yaml). Integration tests run the coordinator under exactly these
rules with a ServiceAccount token, and one compares the API server's audit log of those runs with
the grants: the chart can neither lack a permission the code uses nor grant one it does not.
"""

from __future__ import annotations

from typing import Any

from gpuctl.common import names
from gpuctl.common.names import KMM_GROUP, KMM_IMAGES_CONFIG_PLURAL
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL

READ = ["get", "list", "watch"]
# The coordinator's own namespace (the generator puts the chart's for the placeholder).
OWN_NAMESPACE = "__OWN_NAMESPACE__"
LIST_WATCH = ["list", "watch"]

# Each grant is what a call site makes, and nothing more; tests/integration/test_rbac_audit.py
# compares them with the requests the API server's audit log records while the coordinator runs
# under exactly these rules, and fails on a grant no request used or a request refused.

# Cluster-wide: GPUDrivers (cluster-scoped), Nodes and ResourceClaims (the rollout), the GPUNode
# mirror, and the reviews that check agents' and NodeService callers' tokens.
CLUSTER_RULES: list[dict[str, Any]] = [
    # The watch cache (list, watch); the reconciler reads each GPUDriver fresh (get) and
    # merge-patches its finalizer (patch).
    {"apiGroups": [names.GROUP], "resources": [names.GPUDRIVER_PLURAL], "verbs": [*READ, "patch"]},
    # The reconciler's and the rollout's status writes are merge patches.
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.GPUDRIVER_PLURAL}/status"],
        "verbs": ["patch"],
    },
    # The rollout writes its state, cordons, TARGET_LABEL and KMM's version label on Nodes; the
    # reconciler lists Nodes by label (fresh facts) and writes TARGET_LABEL when it switches an
    # older gpuctl's Module to it; the GPUNode mirror reads a Node to own its GPUNode.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": [*READ, "patch"]},
    # The rollout watches the cluster's Pods (GPU pods block an unload), lists a node's pods
    # afresh before a KMM write, and evicts them when spec.rollout.evictGPUPods allows it.
    {"apiGroups": [""], "resources": ["pods"], "verbs": LIST_WATCH},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    # The rollout's checks read claims from the watch cache only.
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": LIST_WATCH},
    # The mirror watches GPUNodes, creates one per agent's node (one another replica created
    # first comes through the watch) and merge-patches their status; it never deletes one (the
    # owner reference to the Node does).
    {
        "apiGroups": [names.GROUP],
        "resources": [names.GPUNODE_PLURAL],
        "verbs": [*LIST_WATCH, "create"],
    },
    {
        "apiGroups": [names.GROUP],
        "resources": [f"{names.GPUNODE_PLURAL}/status"],
        "verbs": ["patch"],
    },
    # Which KMM is installed: the reconciler reads KMM's NodeModulesConfig CRD (its status
    # schema tells KMM before v2.4.0 apart, gpuctl/gpudriver/kmm_support.py).
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": [f"{names.KMM_NODE_CONFIG_PLURAL}.{names.KMM_GROUP}"],
        "verbs": ["get"],
    },
    # The worker holds are an annotation of the coordinator's own namespace, read and merge-
    # patched (gpuctl/rollout/step/worker_hold.py).
    {
        "apiGroups": [""],
        "resources": ["namespaces"],
        "resourceNames": [OWN_NAMESPACE],
        "verbs": ["get", "patch"],
    },
    # KMM's NodeModulesConfigs: watched for the boot KMM's loader last ran in on each node (a
    # node is Done only when it is the current one, gpuctl/rollout/input/kmm_boots.py); patched for
    # a node whose KMM worker hold was let go (gpuctl/rollout/step/worker_hold.py): the rollout
    # touches it so that KMM makes its refused worker again at once.
    {
        "apiGroups": [KMM_GROUP],
        "resources": [names.KMM_NODE_CONFIG_PLURAL],
        "verbs": [*LIST_WATCH, "patch"],
    },
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
]

# In the coordinator's namespace: the KMM Modules it writes (PUT, never PATCH) and their
# ModuleImagesConfigs (read), its leader-election Lease, and its own Pod's gRPC serving label
# (coordinator/live_nodes/serving_label.py, a merge patch).
NAMESPACE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [KMM_GROUP],
        "resources": [KMM_PLURAL],
        "verbs": [*READ, "create", "update", "delete"],
    },
    # KMM's record of which of a Module's images exist, from the watch cache only: a reload
    # waits until KMM has found its image, and a load that does not come names a missing one.
    {"apiGroups": [KMM_GROUP], "resources": [KMM_IMAGES_CONFIG_PLURAL], "verbs": LIST_WATCH},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    },
    # Its own Pod's serving label (patch); KMM's worker Pods on a node the rollout holds KMM's
    # worker off (delete: gpuctl/rollout/step/worker_hold.py); a reload's image probe on its node,
    # made and deleted (gpuctl/rollout/input/image_probe.py).
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "patch", "delete"]},
]

# With --tls-secret (the chart's coordinator.grpc.tls.mode=selfSigned), in its namespace: the
# leader reads, makes and renews its TLS Secret and publishes the CA in a ConfigMap
# (coordinator/live_nodes/tls/managed_tls.py). Reads and writes are limited to those two names
# (the generator puts the chart's names for the placeholders); a create cannot be limited by
# name in RBAC.
TLS_SECRET_NAME = "__TLS_SECRET__"  # noqa: S105 - a placeholder for a name
TLS_CONFIGMAP_NAME = "__TLS_CONFIGMAP__"
SELF_SIGNED_TLS_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": [TLS_SECRET_NAME],
        "verbs": ["get", "update"],
    },
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [TLS_CONFIGMAP_NAME],
        "verbs": ["get", "update"],
    },
]

# With coordinator.signingCertificateSecrets, in its namespace: the certSecrets GPUDrivers
# sign with, read by name for the preflight's signing-key check
# (coordinator/rollout/signing_certificates.py). The generator puts the chart's list for the
# placeholder; the keySecrets are never readable.
SIGNING_CERTIFICATES = "__SIGNING_CERTIFICATES__"
SIGNING_CERTIFICATE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": [SIGNING_CERTIFICATES],
        "verbs": ["get"],
    },
]

# With kured.enabled, in kured's namespace: kured's DaemonSet, by name, whose lock annotation
# the rollout takes while a node is in a step and lets go after (coordinator/rollout/
# kured_lock.py: a get, then a merge patch carrying the resourceVersion read). The generator
# puts the chart's name for the placeholder.
KURED_DAEMON_SET = "__KURED_DAEMON_SET__"
KURED_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["apps"],
        "resources": ["daemonsets"],
        "resourceNames": [KURED_DAEMON_SET],
        "verbs": ["get", "patch"],
    },
]

# In --events-namespace only (Events about cluster-scoped GPUDrivers live in `default`): a new
# Event (create), a repeat bumps its count (patch).
EVENTS_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]

# For people who run gpuctl, aggregated into Kubernetes' `view` and `edit` ClusterRoles. Both
# kinds are cluster-scoped: they show only through a ClusterRoleBinding of `view`/`edit`.
# view: `gpuctl nodes`, `gpuctl rollout status`, `kubectl get gpud,gpun`.
# The coordinator's Lease by name, wherever the release is: `gpuctl version` reads the leader's
# version from it.
COORDINATOR_LEASE = "__COORDINATOR_LEASE__"
VIEW_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [names.GROUP],
        "resources": [names.GPUDRIVER_PLURAL, names.GPUNODE_PLURAL],
        "verbs": READ,
    },
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [COORDINATOR_LEASE],
        "verbs": ["get"],
    },
    # `gpuctl rollout plan` decides as the coordinator does, from what it reads: the Nodes
    # (Kubernetes' view has none: they are cluster-scoped) and KMM's Module and its record of
    # which images exist. A view bound in one namespace grants none of the cluster-scoped ones.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": READ},
    {"apiGroups": [KMM_GROUP], "resources": [KMM_PLURAL, KMM_IMAGES_CONFIG_PLURAL], "verbs": READ},
]
# edit: + writing GPUDrivers (`kubectl apply`, `gpuctl rollout pause/resume`: a patch of
# spec.rollout and an annotation) and asking a node's agent for a fresh report
# (`gpuctl node inspect --fresh`: a patch of the GPUNode's spec.inspectRequest).
EDIT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [names.GROUP],
        "resources": [names.GPUDRIVER_PLURAL],
        "verbs": ["create", "update", "patch", "delete", "deletecollection"],
    },
    {"apiGroups": [names.GROUP], "resources": [names.GPUNODE_PLURAL], "verbs": ["patch"]},
]

# `gpuctl rollout retry --node NODE` puts a Failed or Blocked node back to Pending: a patch of the
# Node's rollout label. Not aggregated (edit on Nodes is cluster power); bind it to the few
# who retry nodes.
RETRY_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
]
