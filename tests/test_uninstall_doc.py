"""docs/uninstall.md's way out is the `gpuctl driver abandon` command (not a paragraph of
`kubectl label nodes --all ...`, which stripped every GPUDriver's labels), and it names the
guard's annotation and the finalizer as gpuctl.common.names spells them."""

from __future__ import annotations

from pathlib import Path

from gpuctl.cli.main import build_parser
from gpuctl.common import names

DOC = Path(__file__).resolve().parents[1] / "docs" / "uninstall.md"


def test_the_way_out_is_the_abandon_command_and_no_fleet_wide_label_removal() -> None:
    text = DOC.read_text()
    assert "gpuctl driver abandon xe-driver --reason" in text
    assert "--all" not in text.split("## The coordinator is gone for good", 1)[1]
    args = build_parser().parse_args(["driver", "abandon", "xe-driver", "--reason", "r", "--yes"])
    assert args.name == "xe-driver"


def test_the_way_out_names_the_guards_annotation_and_the_finalizer_it_releases() -> None:
    text = DOC.read_text()
    assert f"{names.ALLOW_DELETE_ANNOTATION}=<reason>" in text
    assert names.FINALIZER in text
    assert names.CORDONED_BY_GPUCTL in text
