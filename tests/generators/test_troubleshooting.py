"""docs/troubleshooting.md (hack/generators/troubleshooting.py): every BlockKind and HoldKind
has its section under the heading whose GitHub anchor the CLI prints, once, with its remedy;
the committed page is the generated one (a stale page fails `hack/generate.py --check`:
tests/generators/test_generate.py)."""

from __future__ import annotations

import re

from gpuctl.rollout.reasons import BlockKind, HoldKind
from gpuctl.rollout.remedies import Kind, anchor, heading, remedy_for
from hack.generate import REPO
from hack.generators.troubleshooting import PAGE, page
from tests.test_doc_paths import slug

KINDS: list[Kind] = [*BlockKind, *HoldKind]


def _headings(text: str) -> list[str]:
    return [m[1] for m in re.finditer(r"^#{1,6} +(.*)$", text, flags=re.MULTILINE)]


def test_every_kinds_anchor_is_a_heading_of_the_page_once() -> None:
    anchors = [slug(h) for h in _headings(page())]
    assert len(anchors) == len(set(anchors))  # no heading gets GitHub's "-1" suffix
    for kind in KINDS:
        assert anchors.count(anchor(kind)) == 1, kind
        assert f"\n### {heading(kind)}\n" in page()


def test_each_section_holds_its_kinds_remedy() -> None:
    sections = re.split(r"^### ", page(), flags=re.MULTILINE)[1:]
    by_heading = {section.split("\n", 1)[0]: section for section in sections}
    assert len(by_heading) == len(KINDS)
    for kind in KINDS:
        section = by_heading[heading(kind)]
        remedy = remedy_for(kind)
        assert f"**In one line:** {remedy.summary}\n" in section
        assert "```sh\n" + "\n".join(remedy.confirm) + "\n```" in section
        assert f"[`{kind.value}`](#{anchor(kind)})" in page()  # the index links to it


def test_the_committed_page_is_the_generated_one() -> None:
    assert (REPO / PAGE).read_text() == page()
