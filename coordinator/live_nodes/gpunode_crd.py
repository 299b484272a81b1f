"""The GPUNode CustomResourceDefinition: one cluster-scoped object per GPU node.

Written by the coordinator (status: what the node's agent reports, mirrored only on change) and
read by people and the CLI under plain RBAC (`kubectl get gpunodes`). `spec.inspectRequest` is
the one thing others write: `gpuctl node inspect NODE --fresh` sets a new id, and the
coordinator answers it by asking the agent and writing `status.answeredInspectRequest` (with
`status.inspectError` when the agent could not answer). hack/generate.py writes this
into the chart; a test fails when the committed file is stale.
"""

from __future__ import annotations

from typing import Any

from coordinator.crd_envelope import custom_resource_definition
from gpuctl.common import names

MAX_REQUEST_ID = 128

_DATE_TIME = {"type": "string", "format": "date-time"}


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
                        "description": "Reasons unloading xe now would fail or hurt.",
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
    {"name": "Blockers", "type": "integer", "jsonPath": ".status.summary.blockers"},
    {"name": "Session", "type": "string", "jsonPath": ".status.session"},
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
