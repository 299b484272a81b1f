"""The pure parts of the flag tables: defaults out of help texts, blocks in Markdown, rows."""

from __future__ import annotations

import argparse

import pytest

from hack.generators import GeneratorError
from hack.generators.doc_blocks import block_names, fill_blocks
from hack.generators.flag_tables import parser_tables, split_default


@pytest.mark.parametrize(
    ("help_text", "expected"),
    [
        ("rescan period (default: 300)", ("rescan period", "300")),
        ("per agent (sent in Welcome; default: 60)", ("per agent (sent in Welcome)", "60")),
        (
            "the host's / (default: /; the DaemonSet mounts it at /host)",
            ("the host's / (the DaemonSet mounts it at /host)", "/"),
        ),
        (
            "its name (default: $NODE_NAME, else the hostname); must match the token",
            ("its name; must match the token", "$NODE_NAME, else the hostname"),
        ),
        (
            "older is unknown (default: 3 x (the heartbeat))",
            ("older is unknown", "3 x (the heartbeat)"),
        ),
        ("no default stated (e.g. team=a)", ("no default stated (e.g. team=a)", None)),
    ],
)
def test_split_default(help_text: str, expected: tuple[str, str | None]) -> None:
    assert split_default(help_text) == expected


def test_a_default_stated_twice_is_an_error() -> None:
    with pytest.raises(GeneratorError, match="more than once"):
        split_default("a (default: 1) or b (default: 2)")


def test_rows_take_flags_defaults_and_help_from_the_parser() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the thing")
    parser.add_argument("--port", type=int, default=9460, metavar="PORT", help="a port <n>")
    parser.add_argument("--wait", type=float, default=2.0, help="seconds (default: %(default)g)")
    parser.add_argument("--dry-run", action="store_true", help="change nothing")
    parser.add_argument("-o", "--output", choices=["a|b", "c"], default="c", help="format")
    group = parser.add_argument_group("remote")
    group.add_argument("--to", required=True, help="where")
    assert parser_tables(parser) == (
        "| flag | default | meaning |\n"
        "|---|---|---|\n"
        "| `[NAME]` |  | the thing |\n"
        "| `--port PORT` | `9460` | a port &lt;n&gt; |\n"
        "| `--wait WAIT` | `2` | seconds |\n"
        "| `--dry-run` | off | change nothing |\n"
        "| `-o`, `--output {a\\|b,c}` | `c` | format |\n"
        "\n"
        "*remote*\n"
        "\n"
        "| flag | default | meaning |\n"
        "|---|---|---|\n"
        "| `--to TO` | required | where |\n"
    )


TEXT = """\
# Title
before
<!-- generated: one flags -->
old body
<!-- end generated -->
after
"""


def test_only_the_block_bodies_are_replaced() -> None:
    assert block_names(TEXT) == ["one flags"]
    assert fill_blocks(TEXT, {"one flags": "new\n"}, "doc.md") == TEXT.replace("old body", "new")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (TEXT, "no generated block is called 'one flags'"),
        ("<!-- generated: two flags -->\n", "has no <!-- end generated -->"),
        ("<!-- end generated -->\n", "without a generated block"),
        (
            "<!-- generated: two flags -->\n<!-- generated: two flags -->\n",
            "starts inside another",
        ),
    ],
)
def test_broken_blocks_are_errors(text: str, problem: str) -> None:
    with pytest.raises(GeneratorError, match=problem):
        fill_blocks(text, {"two flags": "x\n"}, "doc.md")
