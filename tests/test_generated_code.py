"""The generated protobuf code in gpuctl/api must be exactly what proto/ generates today."""

from __future__ import annotations

import shutil
from pathlib import Path

from hack.gen_proto import REPO, stale_files


def test_committed_generated_code_is_fresh() -> None:
    assert stale_files() == []


def test_a_changed_proto_is_reported_stale(tmp_path: Path) -> None:
    shutil.copytree(REPO / "proto", tmp_path / "proto")
    shutil.copytree(REPO / "gpuctl" / "api", tmp_path / "gpuctl" / "api")
    proto = next((tmp_path / "proto").rglob("node_report.proto"))
    proto.write_text(
        proto.read_text().replace(
            "string agent_version = 9;", "string agent_version = 9;\n  string extra = 99;"
        )
    )
    problems = stale_files(tmp_path)
    assert any(p.startswith("stale: gpuctl/api/v1alpha1/node_report_pb2.py") for p in problems)
