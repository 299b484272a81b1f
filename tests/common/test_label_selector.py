"""The label selector check: what the API server's grammar accepts passes unchanged, and each
kind of mistake is named (gpuctl/common/label_selector.py)."""

from __future__ import annotations

import pytest

from gpuctl.common.label_selector import SelectorError, check_selector


@pytest.mark.parametrize(
    "selector",
    [
        "gpuctl.dev/pool=a",
        "pool==a",
        "pool!=a",
        "pool",
        "!pool",
        "pool=",
        "team=a,tier in (gold, silver),!canary",
        "tier notin (bronze)",
        "example.com/x_y.z=A-1.b_2",
        " pool = a ",
        "a" * 63 + "=" + "b" * 63,
    ],
)
def test_a_valid_selector_passes_unchanged(selector: str) -> None:
    assert check_selector(selector) == selector


@pytest.mark.parametrize(
    ("selector", "named"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("pool=a,", "empty requirement"),
        ("pool=a,,team=b", "empty requirement"),
        ("pool=a b", "'a b' is not a label value"),
        ("pool=-a", "'-a' is not a label value"),
        ("pool=" + "v" * 64, "is not a label value"),
        ("Example.com/pool=a", "is not a label key"),
        ("/pool=a", "is not a label key"),
        ("pool in (a", "unbalanced '('"),
        ("pool in a)", "unbalanced ')'"),
        ("pool in ()", "the set of values is empty"),
        ("pool in (a,b c)", "'b c' is not a label value"),
        ("pool>3", "is not a label key"),
        ("x" * 254 + "/pool=a", "prefix is over 253"),
    ],
)
def test_a_malformed_selector_is_refused_naming_the_mistake(selector: str, named: str) -> None:
    with pytest.raises(SelectorError, match=named.replace("(", r"\(").replace(")", r"\)")):
        check_selector(selector)


def test_a_prefix_over_253_characters_is_refused() -> None:
    prefix = ".".join(["a" * 60] * 5)  # a valid DNS subdomain, 304 characters
    with pytest.raises(SelectorError, match="over 253"):
        check_selector(f"{prefix}/pool=a")
