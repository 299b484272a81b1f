"""Build the GPUDriver CustomResourceDefinition from the pydantic spec model.

The spec's openAPIV3Schema is derived from gpuctl.gpudriver.model (pydantic's JSON schema, turned
into a Kubernetes structural schema: references inlined, `null` alternatives and titles
dropped, CEL rules kept); the status schema is written here, beside the status the
coordinator writes (gpuctl.gpudriver.status). hack/generate.py writes the result into the Helm
chart and checks that the committed file is current.
"""

from __future__ import annotations

from typing import Any

from gpuctl.common import names
from gpuctl.crds.envelope import custom_resource_definition
from gpuctl.gpudriver import model, revisions
from gpuctl.rollout.reasons import BlockKind, HoldKind, RolloutState, WaitKind

_DROPPED_KEYS = frozenset({"title", "additionalProperties", "$defs"})


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Rewrite one pydantic JSON-schema node as a Kubernetes structural schema node."""
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        resolved = dict(defs[ref.rsplit("/", 1)[-1]])
        resolved.update(node)  # the field's own description wins over the class docstring
        node = resolved
    alternatives = node.pop("anyOf", None)
    if alternatives is not None:
        non_null = [a for a in alternatives if a != {"type": "null"}]
        if len(non_null) != 1:
            raise ValueError(f"cannot express anyOf {alternatives} structurally")
        merged = _structural(non_null[0], defs)
        merged.update(node)  # the field's own description and default win
        node = merged
    if node.get("default", "") is None:
        del node["default"]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS and not (key == "additionalProperties" and value is not False):
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    return out


def spec_schema() -> dict[str, Any]:
    """The openAPIV3Schema of GPUDriver.spec, derived from the pydantic model."""
    raw = model.GPUDriverSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    return schema


def _condition_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "reason": {"type": "string", "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
        },
    }


def status_schema() -> dict[str, Any]:
    """The openAPIV3Schema of GPUDriver.status (written only by the coordinator)."""
    return {
        "type": "object",
        "description": "Observed state, written by gpuctl-coordinator.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "kmmStatus": {
                "type": "string",
                "description": "<available>/<desired> module loaders, N/A, Removing or Recreating.",
            },
            "errors": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Why the driver is not fully loaded; cleared when no longer true.",
            },
            "warnings": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Known issues met on the targeted nodes (firmwarePath on "
                "containerd, an OS the driver does not support, no node targeted), naming the "
                "nodes; cleared when no longer true.",
            },
            "module": {
                "type": "string",
                "description": "The KMM Module, as modules.kmm.sigs.x-k8s.io/<namespace>/<name>.",
            },
            "readyLabel": {
                "type": "string",
                "description": "Node label KMM sets where the module is loaded; gate GPU "
                "DaemonSets on it.",
            },
            "conditions": {
                "type": "array",
                "items": _condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "rollout": _rollout_status_schema(),
            "revisions": _revisions_schema(),
        },
    }


ROLLOUT_PHASES = (
    "Pending",
    "Checking",
    "Draining",
    "Preparing",
    "Loading",
    "Verifying",
    "Done",
    "Blocked",
    "Failed",
    "Skipped",
)


def _rollout_status_schema() -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "description": "The node-by-node rollout of kernelModule.version (see "
        "coordinator/rollout).",
        "properties": {
            "targetVersion": {"type": "string"},
            "state": {"type": "string", "enum": [state.value for state in RolloutState]},
            "holdKind": {
                "type": "string",
                "description": "What keeps new nodes from starting ("
                + ", ".join(kind.value for kind in HoldKind)
                + "); absent when nothing does. The message says it in words.",
            },
            "message": {"type": "string"},
            "total": {**count, "description": "Targeted nodes, skipped ones not counted."},
            "updated": {**count, "description": "Nodes Done at targetVersion."},
            "progress": {"type": "string", "description": "updated/total, for kubectl get."},
            "counts": {
                "type": "object",
                "properties": dict.fromkeys(ROLLOUT_PHASES, count),
            },
            "nodes": {
                "type": "array",
                "maxItems": 50,
                "description": "Nodes not Done, worst first (at most 50).",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "phase": {"type": "string", "enum": list(ROLLOUT_PHASES)},
                        "reason": {"type": "string"},
                        "kind": {
                            "type": "string",
                            "description": "A Blocked node's kind of reason (for programs: "
                            + ", ".join(kind.value for kind in BlockKind)
                            + ").",
                        },
                        "since": {"type": "string", "format": "date-time"},
                        "waiting": {
                            "type": "string",
                            "description": "Why a node that could start did not, in the last pass.",
                        },
                        "waitKind": {
                            "type": "string",
                            "description": "The same for programs ("
                            + ", ".join(kind.value for kind in WaitKind)
                            + ").",
                        },
                    },
                },
            },
            "startedAt": {"type": "string", "format": "date-time"},
            "workerHoldsTrouble": {
                "type": "string",
                "description": "Why the namespace's KMM worker hold list "
                f"({names.KMM_WORKER_HOLDS}) could not be written to what the Nodes say; "
                "absent when it is (condition WorkerHoldsWritten).",
            },
            "maintenanceWindow": {
                "type": "object",
                "description": "With spec.rollout.maintenanceWindows: whether one is open now, "
                "when it closes, or when the next opens.",
                "properties": {
                    "open": {"type": "boolean"},
                    "closesAt": {"type": "string", "format": "date-time"},
                    "nextOpensAt": {"type": "string", "format": "date-time"},
                },
            },
        },
    }


def _revisions_schema() -> dict[str, Any]:
    """status.revisions (gpuctl.gpudriver.revisions): the driver revisions rolled out."""
    timestamp = {"type": "string", "format": "date-time"}
    return {
        "type": "array",
        "maxItems": revisions.MAX_REVISIONS,
        "description": "The driver revisions rolled out, oldest first (`gpuctl rollout "
        "history`); `gpuctl rollout undo` restores one's kernelModule.",
        "items": {
            "type": "object",
            "properties": {
                revisions.REVISION: {"type": "integer", "minimum": 1},
                revisions.VERSION: {"type": "string", "description": "The Module's KMM version."},
                revisions.CONFIG_DIGEST: {
                    "type": "string",
                    "description": "The digest of the node config inside the KMM version.",
                },
                revisions.IMAGES: {"type": "array", "items": {"type": "string"}},
                revisions.KERNEL_MODULE: {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "description": "spec.kernelModule of this revision, as it was.",
                },
                revisions.ROLLED_OUT_AT: timestamp,
                revisions.COMPLETED_AT: timestamp,
                revisions.NODES: {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The most nodes that ran it while it was the target.",
                },
            },
        },
    }


# `kubectl get gpud`: where the rollout is (State, Target, Nodes: done/total) first; the
# Module's name and KMM's own count with -o wide (priority 1).
PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Version", "type": "string", "jsonPath": ".spec.kernelModule.version"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "State", "type": "string", "jsonPath": ".status.rollout.state"},
    {"name": "Target", "type": "string", "jsonPath": ".status.rollout.targetVersion"},
    {"name": "Nodes", "type": "string", "jsonPath": ".status.rollout.progress"},
    {"name": "Blocked", "type": "integer", "jsonPath": ".status.rollout.counts.Blocked"},
    {"name": "Failed", "type": "integer", "jsonPath": ".status.rollout.counts.Failed"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Module",
        "type": "string",
        "jsonPath": ".spec.kernelModule.moduleName",
        "priority": 1,
    },
    {"name": "KMM", "type": "string", "jsonPath": ".status.kmmStatus", "priority": 1},
]


def gpudriver_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object for gpudrivers.gpuctl.dev."""
    return custom_resource_definition(
        group=names.GROUP,
        version=names.VERSION,
        kind=names.GPUDRIVER_KIND,
        plural=names.GPUDRIVER_PLURAL,
        singular=names.GPUDRIVER_SINGULAR,
        short_names=names.GPUDRIVER_SHORT_NAMES,
        description="GPUDriver: the out-of-tree Intel xe driver gpuctl installs through KMM on "
        "the selected nodes.",
        spec=spec_schema(),
        status=status_schema(),
        printer_columns=PRINTER_COLUMNS,
    )
