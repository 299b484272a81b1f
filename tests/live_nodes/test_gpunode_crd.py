"""The committed GPUNode CRD is generated, and has the shape the CLI is written against."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from coordinator.live_nodes.gpunode_crd import gpunode_crd

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "charts" / "gpuctl" / "crds" / "gpunodes.gpuctl.dev.yaml"


def _version() -> dict[str, Any]:
    version: dict[str, Any] = gpunode_crd()["spec"]["versions"][0]
    return version


def test_committed_crd_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_gpunode_crd.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(CRD_FILE.read_text()) == gpunode_crd()


def test_identity_and_columns() -> None:
    crd = gpunode_crd()
    assert crd["metadata"]["name"] == "gpunodes.gpuctl.dev"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == "GPUNode"
    version = _version()
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["GPUs", "Module", "Blockers", "Session", "Age"]


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
    }
    assert status["session"]["enum"] == ["Connected", "Disconnected"]
    assert set(status["summary"]["properties"]) == {"gpus", "drivers", "module", "blockers"}
    assert status["report"]["x-kubernetes-preserve-unknown-fields"] is True
