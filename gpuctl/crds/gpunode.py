"""The GPUNode CustomResourceDefinition: one cluster-scoped object per GPU node.

Written by the coordinator (status: what the node's agent reports, mirrored only on change) and
read by people and the CLI under plain RBAC (`kubectl get gpunodes`). `spec.inspectRequest` is
the one thing others write: `gpuctl node inspect NODE --fresh` sets a new id, and the
coordinator answers it by asking the agent and writing `status.answeredInspectRequest` (with
`status.inspectError` when the agent could not answer). `status.conditions[type=Fresh]` says
whether the coordinator counts the report now, and is what readers (the CLI) go by;
`status.unloadBlockers` repeats it for `kubectl get` ("unknown" instead of a count).
hack/generate.py writes this into the chart; a test fails when the committed file is stale.
"""

from __future__ import annotations

from typing import Any

from gpuctl.common import names
from gpuctl.crds.envelope import custom_resource_definition

MAX_REQUEST_ID = 128

_DATE_TIME = {"type": "string", "format": "date-time"}
_FRESH = f'.status.conditions[?(@.type=="{names.GPUNODE_FRESH}")]'


def condition_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "lastTransitionTime": _DATE_TIME,
            "reason": {"type": "string", "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
        },
    }


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Requests to the coordinator about this node.",
        "properties": {
            "inspectRequest": {
                "type": "object",
                "description": "Ask for a fresh report now: set a new id; the coordinator "
                "answers in status.answeredInspectRequest.",
                "required": ["id"],
                "properties": {
                    "id": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_REQUEST_ID,
                        "pattern": "^[A-Za-z0-9._:-]+$",
                        "description": "Any new value; e.g. a UUID or a timestamp.",
                    },
                    "requestedAt": {**_DATE_TIME, "description": "When it was asked for."},
                },
            }
        },
    }


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "What the node's agent reports, mirrored by gpuctl-coordinator.",
        "properties": {
            "session": {
                "type": "string",
                "enum": ["Connected", "Disconnected"],
                "description": "Whether the agent's stream to the coordinator is open.",
            },
            "conditions": {
                "type": "array",
                "description": f"{names.GPUNODE_FRESH}: whether the coordinator counts the "
                "report below now: True while the agent was heard from (report or heartbeat) "
                "within its freshness bound and the report is the agent's latest; False "
                "otherwise, with the reason ("
                + ", ".join(
                    r.value for r in names.FreshReason if r is not names.FreshReason.AGENT_HEARD
                )
                + ") and, for NoHeartbeat, how long the agent had been silent. While False the "
                "node's state is unknown, and unknown is never safe.",
                "items": condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "unloadBlockers": {
                "type": "string",
                "description": "summary.blockers while the report is fresh, else "
                f'"{names.UNKNOWN_BLOCKERS}" (for kubectl\'s Blockers column).',
            },
            "agentVersion": {"type": "string"},
            "bootId": {"type": "string", "description": "The node's boot id as the agent read it."},
            "reportReceivedAt": {
                **_DATE_TIME,
                "description": "When the coordinator received the report below.",
            },
            "answeredInspectRequest": {
                "type": "string",
                "description": "The spec.inspectRequest.id last answered: by the report below, "
                "or by inspectError when the agent could not answer.",
            },
            "inspectError": {
                "type": "string",
                "description": "Why answeredInspectRequest was not answered with a fresh "
                "report (agent not connected, no answer in time). Absent after a success.",
            },
            "summary": {
                "type": "object",
                "properties": {
                    "gpus": {
                        "type": "integer",
                        "description": "GPU functions that are not SR-IOV VFs.",
                    },
                    "drivers": {"type": "array", "items": {"type": "string"}},
                    "module": {
                        "type": "string",
                        "description": "The xe module: backport tag, else version, else "
                        "srcversion prefix, else its state.",
                    },
                    "blockers": {
                        "type": "integer",
                        "description": "Reasons unloading xe now would fail or hurt, as "
                        "the report below says (fresh or not: see unloadBlockers).",
                    },
                    "atBoot": {
                        "type": "string",
                        "description": "What the next boot does with the kernel's in-tree "
                        "xe (report.inTreeAutoload): Autoloads (KMM's loader removes it "
                        "again after a reboot, once the GPU is idle: docs/reboots.md), "
                        "Blacklisted, NoInTreeModule, Disabled (no xe loads, KMM's neither), "
                        "Unknown.",
                    },
                },
            },
            "report": {
                "type": "object",
                "description": "The latest NodeReport as proto3 JSON (lowerCamelCase).",
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.summary.gpus"},
    {"name": "Module", "type": "string", "jsonPath": ".status.summary.module"},
    {"name": "Blockers", "type": "string", "jsonPath": ".status.unloadBlockers"},
    {"name": "Session", "type": "string", "jsonPath": ".status.session"},
    {"name": "Fresh", "type": "string", "jsonPath": f"{_FRESH}.status"},
    {"name": "Why", "type": "string", "priority": 1, "jsonPath": f"{_FRESH}.reason"},
    {"name": "At boot", "type": "string", "priority": 1, "jsonPath": ".status.summary.atBoot"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def gpunode_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object for gpunodes.gpuctl.dev."""
    return custom_resource_definition(
        group=names.GROUP,
        version=names.VERSION,
        kind=names.GPUNODE_KIND,
        plural=names.GPUNODE_PLURAL,
        singular=names.GPUNODE_SINGULAR,
        short_names=names.GPUNODE_SHORT_NAMES,
        description="GPUNode: one GPU node's truth as its gpuctl agent reports it (name = the "
        "Node's name).",
        spec=spec_schema(),
        status=status_schema(),
        printer_columns=PRINTER_COLUMNS,
    )
