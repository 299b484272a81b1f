"""Backport tags and the in-tree / out-of-tree verdict, from plain facts."""

from __future__ import annotations

import pytest

from agent.kmod import ModuleState
from agent.provenance import Provenance, judge_provenance, parse_backport_tag

BACKPORT = (
    "backported from  (65d3cdda6) using backports xeb_v6.17.13.62_260409.8 "
    "for 6.8.0-60-generic Kernel "
)


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        (BACKPORT, "xeb_v6.17.13.62_260409.8"),
        (
            "backported from (1a2b3c) using backports xebr_v7.1.4.6_260728.7 for 6.14.0-1 Kernel",
            "xebr_v7.1.4.6_260728.7",
        ),
        ("xeb_v7.1.4.6_260728.7", "xeb_v7.1.4.6_260728.7"),
        ("1.0.0", ""),
        ("", ""),
    ],
)
def test_parse_backport_tag(version: str, tag: str) -> None:
    assert parse_backport_tag(version) == tag


def live(
    *,
    taint: str | None = "",
    version: str | None = "",
    file_intree: bool | None = None,
    filename: str = "",
) -> Provenance:
    return judge_provenance(
        ModuleState.LIVE,
        taint=taint,
        version=version,
        file_intree=file_intree,
        filename=filename,
    ).provenance


def test_builtin_is_in_tree_and_not_loaded_has_none() -> None:
    assert (
        judge_provenance(ModuleState.BUILTIN, taint=None, version=None, file_intree=None).provenance
        is Provenance.IN_TREE
    )
    assert (
        judge_provenance(ModuleState.NOT_LOADED, taint="", version="", file_intree=None).provenance
        is Provenance.NONE
    )


def test_out_of_tree_signs() -> None:
    assert live(taint="OE") is Provenance.OUT_OF_TREE
    assert live(taint="", version=BACKPORT) is Provenance.OUT_OF_TREE
    assert (
        live(taint="OE", version=BACKPORT, file_intree=False, filename="/x/xe.ko")
        is Provenance.OUT_OF_TREE
    )


def test_in_tree_signs() -> None:
    assert live() is Provenance.IN_TREE
    assert live(version="1.0", file_intree=True, filename="/x/xe.ko") is Provenance.IN_TREE


def test_contradictions_and_unreadable_are_unknown() -> None:
    verdict = judge_provenance(
        ModuleState.LIVE, taint="OE", version="", file_intree=True, filename="/x/xe.ko"
    )
    assert verdict.provenance is Provenance.UNKNOWN
    assert verdict.evidence.startswith("contradicting evidence: taint 'OE' includes O")
    assert "/x/xe.ko has intree=Y" in verdict.evidence
    assert live(taint=None) is Provenance.UNKNOWN
    assert live(version="2.0") is Provenance.UNKNOWN
    assert live(taint="", file_intree=False, filename="/x/xe.ko") is Provenance.UNKNOWN
