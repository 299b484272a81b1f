"""The worker hold guard: no KMM worker Pod on a node the rollout holds KMM's worker off.

A node's devices can be opened after the rollout's check and before KMM's worker runs (the
issue "Twelve ways a busy node can still lose its driver", item 8). KMM's version change cannot
be taken back then, and KMM makes its unloader again however often it is deleted
(gpuctl/rollout/step/worker_hold.py). So the coordinator lists such a node in an annotation of
its own namespace (names.KMM_WORKER_HOLDS, node names separated by spaces), deletes KMM's
worker Pods there, and this guard refuses the CREATE of a KMM worker Pod (labelled
`kmm.node.kubernetes.io/worker-action`) in that namespace on a listed node. KMM retries; the
rollout lets the hold go once the node is checked idle again, with its KMM write. The list is
made of the Nodes that carry names.KMM_WORKER_HELD, written once a pass after the node writes
(coordinator/rollout/worker_holds.py). The chart keeps the guard through `helm rollback`, a
downgrade and `helm uninstall` (docs/uninstall.md removes it with the list).

The list is on the namespace, not in a ConfigMap parameter: the API server hands every
policy the request's namespace (`namespaceObject`) from the cache all admission uses, while a
ConfigMap parameter is read through a per-policy informer that kube-apiserver v1.36 was seen
to miss ("no params found for policy binding", after policies were made and deleted: the
guard then either refuses every worker or none). Without the annotation nothing is refused.
One home, like the other guards: hack/generate.py writes these objects into the chart
(charts/gpuctl/templates/kmm-worker-hold.yaml) and the tests install the same objects.
"""

from __future__ import annotations

from typing import Any

from coordinator.policies.admission_policy import (
    DOCS,
    cel_string,
    policy_and_binding,
    templated_message,
)
from gpuctl.common import names


def refusal_message(node: str) -> str:
    """What a refused worker Pod says (also the CEL message's text, for tests to compare)."""
    return (
        f"gpuctl holds KMM's worker off node {node}: its devices were opened after gpuctl's "
        f"check, before KMM's worker ran (the node's {names.REASON} says by what). It is let "
        f"go once the node is checked idle again (see {DOCS})"
    )


def guard_objects(
    name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, both called `name`, refusing KMM's
    worker Pods in `namespace` on the nodes its names.KMM_WORKER_HOLDS annotation lists."""
    key = cel_string(names.KMM_WORKER_HOLDS)
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "objectSelector": {
                "matchExpressions": [{"key": names.KMM_WORKER_ACTION_LABEL, "operator": "Exists"}]
            },
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                }
            ],
        },
        # The namespace by name: a Pod of the coordinator's namespace is all there is to match.
        "matchConditions": [
            {"name": "in-namespace", "expression": f"request.namespace == {cel_string(namespace)}"}
        ],
        "variables": [
            {
                "name": "node",
                "expression": "has(object.spec.nodeName) ? object.spec.nodeName : ''",
            },
            {
                "name": "held",
                "expression": (
                    f"has(namespaceObject.metadata.annotations) && {key} in "
                    f"namespaceObject.metadata.annotations ? "
                    f"namespaceObject.metadata.annotations[{key}].split(' ') : []"
                ),
            },
        ],
        "validations": [
            {
                "expression": "variables.node == '' || !(variables.node in variables.held)",
                "messageExpression": templated_message(
                    refusal_message("\0NODE\0"), {"NODE": "variables.node"}
                ),
                "reason": "Forbidden",
            }
        ],
    }
    return policy_and_binding(name, spec, labels, annotations)
