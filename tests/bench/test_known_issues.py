"""bench.known_issues asks on both sides, checks their answers agree, and reports what the
memo kept."""

from __future__ import annotations

import pytest

from bench.known_issues import main


def test_the_bench_prints_both_sides_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--nodes", "40", "--asks", "4"])
    out = capsys.readouterr().out
    assert "40 nodes, 4 asks" in out
    assert "wanted found afresh: median" in out
    assert "ratio wanted kept / wanted found afresh (median)" in out
    kept = out.split("(")[1].split("%")[0]
    assert float(kept) > 50  # all but the node that moved between asks
