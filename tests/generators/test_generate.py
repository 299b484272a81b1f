"""Every generated file is current, and the check names what is stale and how to fix it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from hack.generate import FIX, REPO, differences, problems, write
from hack.generators import flag_docs, troubleshooting

# What the generators read from a checkout (the rest comes from the imported code).
INPUTS = ("proto", "gpuctl/api", "charts", "docs", "README.md", "examples")


def _checkout(tmp_path: Path) -> Path:
    """A copy of what the generators read, made current (so that each test below sees only
    the change it makes, whatever the state of the working tree)."""
    for name in INPUTS:
        source = REPO / name
        if not source.exists():
            continue
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tmp_path / name)
    write(tmp_path, differences(tmp_path))
    return tmp_path


def test_committed_generated_files_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_a_changed_proto_is_reported_stale(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    proto = repo / "proto" / "gpuctl" / "api" / "v1alpha1" / "node_report.proto"
    proto.write_text(
        proto.read_text().replace(
            "string agent_version = 9;", "string agent_version = 9;\n  string extra = 99;"
        )
    )
    assert problems(repo) == [
        "stale: gpuctl/api/v1alpha1/node_report_pb2.py (generated from proto/)",
        "stale: gpuctl/api/v1alpha1/node_report_pb2.pyi (generated from proto/)",
        FIX,
    ]


def test_a_stub_without_its_proto_is_left_over(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    (repo / "gpuctl" / "api" / "v1alpha1" / "gone_pb2.py").write_text("# old\n")
    assert problems(repo) == [
        "left over: gpuctl/api/v1alpha1/gone_pb2.py (no longer generated from proto/)",
        FIX,
    ]


def test_a_hand_edited_flag_table_is_reported_then_regenerated(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    doc = repo / "docs" / "agent.md"
    original = doc.read_text()
    doc.write_text(original.replace("| `--no-udev` | off |", "| `--no-udev` | on |"))
    assert problems(repo) == [
        f"stale: docs/agent.md (generated from {flag_docs.GENERATOR.source})",
        FIX,
    ]
    write(repo, differences(repo))
    assert doc.read_text() == original
    assert problems(repo) == []


def test_a_doc_block_naming_no_command_is_an_error(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    doc = repo / "docs" / "extra.md"
    doc.write_text("<!-- generated: gpuctl-agent fly flags -->\n<!-- end generated -->\n")
    (error,) = problems(repo)
    assert error.startswith("error: docs/extra.md:1: no generated block is called")


def test_a_command_in_no_doc_block_is_an_error(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    doc = repo / "docs" / "agent.md"
    text = doc.read_text()
    start = text.index("<!-- generated: gpuctl-agent run flags -->")
    end = text.index("<!-- end generated -->", start) + len("<!-- end generated -->")
    doc.write_text(text[:start] + text[end:])
    (error,) = problems(repo)
    assert error.startswith("error: no doc lists the flags of gpuctl-agent run: add a block")


def test_a_command_in_two_doc_blocks_is_an_error(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    (repo / "docs" / "more.md").write_text(
        "<!-- generated: gpuctl rollout flags -->\n<!-- end generated -->\n"
    )
    (error,) = problems(repo)
    assert "the flags of `gpuctl rollout` are already in a block in docs/cli.md" in error


def test_an_edited_health_check_makes_the_argocd_patch_stale(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    script = repo / "examples" / "argocd" / "gpudriver-health.lua"
    script.write_text(script.read_text() + "-- edited\n")
    assert [d.describe() for d in differences(repo)] == [
        "stale: examples/argocd/argocd-cm.yaml (generated from "
        "examples/argocd/gpudriver-health.lua)"
    ]


def test_a_stale_or_missing_troubleshooting_page_is_reported_then_regenerated(
    tmp_path: Path,
) -> None:
    repo = _checkout(tmp_path)
    page = repo / "docs" / "troubleshooting.md"
    original = page.read_text()
    page.write_text(original.replace("### Blocked: `gpu-pods`", "### Blocked: GPU pods"))
    stale = f"stale: docs/troubleshooting.md (generated from {troubleshooting.SOURCE})"
    assert problems(repo) == [stale, FIX]
    page.unlink()
    assert problems(repo) == [stale.replace("stale", "missing"), FIX]
    write(repo, differences(repo))
    assert page.read_text() == original
    assert problems(repo) == []
