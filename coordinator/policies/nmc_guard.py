"""The NodeModulesConfig delete guard: nobody deletes the record of a node's live gpuctl driver.

KMM keeps, per node, a NodeModulesConfig (cluster-scoped, named after the node): its spec says
what to load, its status what is loaded. Delete it and KMM's Module reconciler recreates it at
once from the Module, with a spec and no status; KMM's NMC reconciler then sees a module it
must load that is not loaded and starts a loader, whose first act is `modprobe -r` of the
Module's `inTreeModulesToRemove` — `xe`, which is also the name of the live out-of-tree module
— retried until the device is idle: a reload the rollout never checked, on a node that may be
busy (the issue "Twelve ways a busy node can still lose its driver", item 9; seen on KMM v2.6.0
and main de3f8c9 in tests/integration/rollout/test_kmm_faults.py).

KMM itself never deletes a NodeModulesConfig (v2.6.0 and main: no Delete of one in its
source); the garbage collector does, when the Node it is owned by is deleted, and then there
is no node left to reload. So the guard refuses a DELETE of a NodeModulesConfig whose status
lists a module of the coordinator's namespace (a driver gpuctl loaded is live there), unless

- the caller is the garbage collector (`system:serviceaccount:kube-system:
  generic-garbage-collector` with the controller manager's per-controller credentials,
  `system:kube-controller-manager` without), or
- the NodeModulesConfig carries `gpuctl.dev/allow-delete: <reason>` (the deliberate way out,
  audited like the Module guard's).

A NodeModulesConfig with nothing of gpuctl's loaded is not guarded. One home, like the Module
guard: hack/generate.py writes these objects into the chart
(charts/gpuctl/templates/nmc-delete-guard.yaml) and the tests install the same objects.
"""

from __future__ import annotations

from typing import Any

from coordinator.policies.admission_policy import (
    DOCS,
    allow_reason_audit,
    allowed_by_annotation,
    cel_string,
    policy_and_binding,
    service_account_username,
    templated_message,
)
from gpuctl.common import names

GARBAGE_COLLECTOR_USERNAMES = (
    service_account_username("kube-system", "generic-garbage-collector"),
    "system:kube-controller-manager",
)


def refusal_message(node: str, namespace: str) -> str:
    """What a refused DELETE says (also the CEL message's text, for tests to compare)."""
    return (
        f"deleting NodeModulesConfig {node} makes KMM reload the driver on node {node}, busy "
        f"or not: KMM recreates it without status, and its loader removes the live xe module "
        f"(a Module of namespace {namespace} is loaded there). To take the driver off this "
        f"node, take the node out of its GPUDriver: gpuctl unloads it after its checks. If "
        f"this is deliberate, annotate the NodeModulesConfig "
        f"{names.ALLOW_DELETE_ANNOTATION}=<reason> first (see {DOCS})"
    )


def _loaded_here(namespace: str) -> str:
    """CEL: the NodeModulesConfig being deleted lists a loaded module of `namespace`."""
    return (
        "has(oldObject.status) && has(oldObject.status.modules) && "
        f"oldObject.status.modules.exists(m, m.namespace == {cel_string(namespace)})"
    )


def guard_objects(
    name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, both called `name`, guarding every
    NodeModulesConfig on which a Module of `namespace` is loaded."""
    collectors = ", ".join(cel_string(user) for user in GARBAGE_COLLECTOR_USERNAMES)
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [names.KMM_GROUP],
                    "apiVersions": ["*"],
                    "operations": ["DELETE"],
                    "resources": [names.KMM_NODE_CONFIG_PLURAL],
                }
            ],
        },
        "variables": [
            {
                "name": "byGarbageCollector",
                "expression": f"request.userInfo.username in [{collectors}]",
            },
            {"name": "loadedHere", "expression": _loaded_here(namespace)},
        ],
        "validations": [
            {
                "expression": (
                    "!variables.loadedHere || variables.byGarbageCollector || "
                    f"({allowed_by_annotation('oldObject')})"
                ),
                "messageExpression": templated_message(
                    refusal_message("\0NODE\0", namespace), {"NODE": "oldObject.metadata.name"}
                ),
                "reason": "Forbidden",
            },
        ],
        "auditAnnotations": [
            allow_reason_audit("variables.loadedHere && !variables.byGarbageCollector", "oldObject")
        ],
    }
    return policy_and_binding(name, spec, labels, annotations)
