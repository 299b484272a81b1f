"""Kernel-mapping regexps as KMM's RE2 reads them (gpuctl.gpudriver.re2), plain strings."""

from __future__ import annotations

import re

import pytest

from gpuctl.gpudriver import re2


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^6(?=\.8)", "lookahead"),
        (r"^6(?!\.8)", "negative lookahead"),
        (r"(?<=rt)-x", "lookbehind"),
        (r"(?<!rt)-x", "negative lookbehind"),
        (r"^(?>6)", "atomic group"),
        (r"(?P<v>6)(?P=v)", "named backreference"),
        (r"(6)?(?(1)a|b)", "conditional"),
        (r"(6)\1", "backreferences"),
        (r"^6\.8\Z", r"\Z"),
        (r"^6.*+$", "possessive"),
        (r"^6{1,2}+", "possessive"),
        (r"[]\Z]", r"\Z"),  # Go refuses its unknown escapes inside a class too
        (r"[\1]", r"\1"),
        (r"(?x)6", "flag 'x'"),
        (r"a{1001}", "repeat count"),
    ],
)
def test_what_re2_refuses_is_named(pattern: str, why: str) -> None:
    assert why in (re2.refusal(pattern) or "")


@pytest.mark.parametrize(
    "pattern",
    [r"^.+$", r"\(?=literal", r"[(?=]x", r"^(?P<major>\d+)", r"(?i)^6", r"a\\Z", r"^6\z"],
)
def test_what_re2_accepts_is_not_refused(pattern: str) -> None:
    assert re2.refusal(pattern) is None


def test_re2_end_of_text_matches_as_in_go() -> None:
    assert re2.search(r"^6\.8\.0-60-generic\z", "6.8.0-60-generic")
    assert not re2.search(r"^6\.8\z", "6.8.0-60-generic")
    assert re2.to_python(r"[\z]a\z") == r"[\z]a\Z"


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^6\.8{,2}$", "x{0,n}"),
        (r"[[:digit:]]", "POSIX class"),
        (r"\pN", "Unicode class"),
        (r"\Q6.8\E", "quoting"),
        (r"\x{36}", "hex escape"),
        (r"(?U)6.*", "ungreedy"),
        (r"(?<v>6)", "(?P<name>...)"),
        (r"(?-i)6", "turned off"),
        (r"[\d-z]", "class range"),
        (r"[[a]", "nested set"),
        (r"[a&&b]", "set operation"),
    ],
)
def test_what_go_and_python_read_differently_is_named(pattern: str, why: str) -> None:
    assert re2.refusal(pattern) is None
    assert why in (re2.divergence(pattern) or "")


def test_go_dollar_is_the_end_of_text_unless_multiline() -> None:
    assert not re2.search(r"generic$", "6.8.0-60-generic\n")
    assert re2.search(r"(?m)generic$", "6.8.0-60-generic\nx")


def test_a_compiled_pattern_is_kept_and_a_refused_one_is_not() -> None:
    """A pass matches every node's kernel: the pattern is translated once, not per node; a
    pattern `re` refuses raises every time (nothing kept in its place)."""
    assert re2.compiled(r"^6\.8\..*generic$") is re2.compiled(r"^6\.8\..*generic$")
    for _ in range(2):
        with pytest.raises(re.error):
            re2.compiled(r"(unclosed")
