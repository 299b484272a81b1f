"""The pool move guard: a shard's node does not leave its pool while the shard has a stake in it.

A sharded fleet runs one release per node pool (docs/deploying.md#sharding); each
coordinator watches only the Nodes its `shard.nodeSelector` selects. Relabel a node out of the
pool and its release no longer sees it, and the release whose pool it joins refuses to act on
another GPUDriver's node. So a node moved mid-step stayed cordoned and prepared (VFs
disabled, functions unbound) with KMM perhaps still acting, and a node moved while loaded kept
its old GPUDriver's target label: nobody could unload it through the checks, and deleting
that GPUDriver waited for it for ever (the issue "Twelve ways a busy node can still lose its
driver", item 12). Neither can be finished from the other side: the node's agent belongs to
the new pool's release as soon as the DaemonSets follow the label.

So the guard refuses an UPDATE that takes a Node out of the pool (it matched the pool's
labels before and not after) while the node carries

- the rollout's state label in a step (Checking to Verifying), or
- `gpuctl.dev/driver-target` (a GPUDriver of this pool has it loaded),

unless the Node carries `gpuctl.dev/allow-pool-move: <reason>` (the deliberate way out,
audited). The way in docs/deploying.md: take the node out of its GPUDriver's nodeSelector
first, so its release unloads it after its checks, then relabel it. Only rendered for a shard
(shard.nodeSelector set); hack/generate.py writes it into the chart
(charts/gpuctl/templates/pool-move-guard.yaml) and the tests install the same objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from coordinator.policies.admission_policy import (
    allow_reason_audit,
    allowed_by_annotation,
    cel_string,
    policy_and_binding,
    templated_message,
)
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS

DOCS = "docs/deploying.md#sharding"


def pool_literal(pool: Mapping[str, str]) -> str:
    """The pool's labels as a CEL map literal (JSON of strings is one)."""
    return json.dumps(dict(sorted(pool.items())), separators=(",", ":"))


def refusal_message(node: str, stake: str) -> str:
    """What a refused move says (also the CEL message's text, for tests to compare)."""
    return (
        f"node {node} is {stake}: moved out of this gpuctl release's pool, no release could "
        f"finish its step or unload it through its checks (the other pool's release refuses "
        f"another GPUDriver's node). Take it out of its GPUDriver's nodeSelector first (the "
        f"release unloads it after its checks), then relabel it. If this is deliberate, "
        f"annotate the node {names.ALLOW_POOL_MOVE_ANNOTATION}=<reason> first (see {DOCS})"
    )


def _in_pool(holder: str) -> str:
    """CEL: `<holder>` carries every label of the pool."""
    return (
        f"variables.pool.all(k, has({holder}.metadata.labels) && k in {holder}.metadata.labels "
        f"&& {holder}.metadata.labels[k] == variables.pool[k])"
    )


def _label(key: str) -> str:
    """CEL: the old Node's label `key`, '' when absent."""
    quoted = cel_string(key)
    return (
        f"(has(oldObject.metadata.labels) && {quoted} in oldObject.metadata.labels ? "
        f"oldObject.metadata.labels[{quoted}] : '')"
    )


def _stake() -> str:
    """CEL: the words for this pool's stake in the old Node, '' when it has none."""
    steps = ", ".join(cel_string(phase.value) for phase in sorted(IN_PROGRESS))
    state, target = _label(names.STATE_LABEL), _label(names.TARGET_LABEL)
    return (
        f"{state} in [{steps}] ? 'mid-step (' + {state} + ') in its rollout' : "
        f"{target} != '' ? 'loaded by GPUDriver ' + {target} : ''"
    )


def guard_objects(
    name: str,
    pool: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, both called `name`, keeping the nodes of
    the pool `pool` (a CEL map literal: pool_literal, or the chart's expression for it) in
    it while this pool's release has a stake in them."""
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["UPDATE"],
                    "resources": ["nodes"],
                }
            ],
        },
        "variables": [
            {"name": "pool", "expression": pool},
            {
                "name": "leaves",
                "expression": f"{_in_pool('oldObject')} && !{_in_pool('object')}",
            },
            {"name": "stake", "expression": _stake()},
        ],
        "validations": [
            {
                "expression": (
                    "!variables.leaves || variables.stake == '' || "
                    f"({allowed_by_annotation('object', names.ALLOW_POOL_MOVE_ANNOTATION)})"
                ),
                "messageExpression": templated_message(
                    refusal_message("\0NODE\0", "\0STAKE\0"),
                    {"NODE": "object.metadata.name", "STAKE": "variables.stake"},
                ),
                "reason": "Forbidden",
            },
        ],
        "auditAnnotations": [
            allow_reason_audit(
                "variables.leaves && variables.stake != ''",
                "object",
                names.ALLOW_POOL_MOVE_ANNOTATION,
                names.ALLOW_POOL_MOVE_AUDIT_KEY,
            )
        ],
    }
    return policy_and_binding(name, spec, labels, annotations)
