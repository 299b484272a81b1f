"""docs/uninstall.md's way out names every label and annotation the rollout leaves on a Node,
and the guard's annotation, as gpuctl.common.names spells them (a renamed one fails here)."""

from __future__ import annotations

from pathlib import Path

from gpuctl.common import names

DOC = Path(__file__).resolve().parents[1] / "docs" / "uninstall.md"

NODE_ANNOTATIONS = (
    names.SINCE,
    names.REASON,
    names.STATE_VERSION,
    names.GPUDRIVER,
    names.CORDONED_BY_GPUCTL,
    names.DRIVER_IMAGE,
    *names.PASS_DETAIL,
)


def test_the_way_out_removes_every_node_label_and_annotation_of_the_rollout() -> None:
    text = DOC.read_text()
    for key in (*NODE_ANNOTATIONS, names.TARGET_LABEL, names.STATE_LABEL):
        assert f"{key}-" in text, f"docs/uninstall.md does not remove {key}"
    assert names.kmm_version_label("$NS", "$DRIVER-gpu") + "-" in text


def test_the_way_out_names_the_guards_annotation_and_the_finalizer_it_releases() -> None:
    text = DOC.read_text()
    assert f'{names.ALLOW_DELETE_ANNOTATION}="' in text
    assert names.FINALIZER in text
