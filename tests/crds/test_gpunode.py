"""The GPUNode CRD has the shape the CLI is written against.

That the committed file is what gpuctl/crds/gpunode.py builds is checked with
every generated file, by tests/generators/test_generate.py.
"""

from __future__ import annotations

from typing import Any

from gpuctl.crds.gpunode import gpunode_crd


def _version() -> dict[str, Any]:
    version: dict[str, Any] = gpunode_crd()["spec"]["versions"][0]
    return version


def test_identity_and_columns() -> None:
    crd = gpunode_crd()
    assert crd["metadata"]["name"] == "gpunodes.gpuctl.dev"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == "GPUNode"
    version = _version()
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == [
        "GPUs",
        "Module",
        "Blockers",
        "Session",
        "Fresh",
        "Why",
        "At boot",
        "Age",
    ]
    assert columns["At boot"]["priority"] == 1  # with -o wide
    # A stale node's blockers read "unknown", never a count (or kubectl's "<none>").
    assert columns["Blockers"] == {
        "name": "Blockers",
        "type": "string",
        "jsonPath": ".status.unloadBlockers",
    }
    assert columns["Fresh"]["jsonPath"] == '.status.conditions[?(@.type=="Fresh")].status'
    assert columns["Why"]["jsonPath"] == '.status.conditions[?(@.type=="Fresh")].reason'
    assert columns["Why"]["priority"] == 1  # with -o wide


def test_the_shape_the_cli_reads() -> None:
    schema = _version()["schema"]["openAPIV3Schema"]["properties"]
    request = schema["spec"]["properties"]["inspectRequest"]["properties"]
    assert set(request) == {"id", "requestedAt"}
    assert request["requestedAt"]["format"] == "date-time"
    status = schema["status"]["properties"]
    assert set(status) == {
        "session",
        "agentVersion",
        "bootId",
        "reportReceivedAt",
        "answeredInspectRequest",
        "inspectError",
        "summary",
        "report",
        "conditions",
        "unloadBlockers",
    }
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
    }
    assert status["session"]["enum"] == ["Connected", "Disconnected"]
    assert set(status["summary"]["properties"]) == {
        "gpus",
        "drivers",
        "module",
        "blockers",
        "atBoot",
    }
    assert status["report"]["x-kubernetes-preserve-unknown-fields"] is True
