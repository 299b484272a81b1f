"""Every `gpuctl` command's `--help` reads as kubectl's: a description, the flags, an
`examples:` block (each example a `# what it does` comment over the command), then the exit
codes. Each example is run through gpuctl's own parser, so an example that a flag's rename
would break fails here, not in an admin's terminal."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

import pytest

from gpuctl.cli.help_format import KubectlHelpFormatter, example_commands, examples
from gpuctl.cli.main import build_parser


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command that runs something (a leaf of the tree), with its words."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
        return
    for name, child in groups[0].choices.items():
        yield from commands(child, (*path, name))


LEAVES = dict(commands(build_parser()))


def test_the_tree_is_walked() -> None:
    assert {"nodes", "rollout status", "node inspect", "support-bundle"} <= {
        " ".join(p) for p in LEAVES
    }


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_every_command_has_examples_that_its_parser_takes(path: tuple[str, ...]) -> None:
    parser = LEAVES[path]
    shown = example_commands(parser.epilog)
    assert shown, f"`gpuctl {' '.join(path)} --help` has no examples"
    for example in shown:
        words = shlex.split(example, comments=True)
        assert words[: 1 + len(path)] == ["gpuctl", *path], example
        args = build_parser().parse_args(words[1:])
        assert callable(args.run), example
    text = parser.format_help()
    assert text.index("examples:") > text.index("options:")
    if "\nexit codes:" in text:
        assert text.index("\nexit codes:") > text.index("examples:")


def test_prose_is_wrapped_and_blocks_laid_out_by_hand_are_kept() -> None:
    formatter = KubectlHelpFormatter("gpuctl")
    prose = "one two three four five six seven eight nine ten " * 3
    block = examples(("gpuctl nodes -w", "then each change"), ("gpuctl nodes", ""))
    table = "columns:\n  ORDER   the order\n  NOW     the state"
    text = formatter._fill_text(f"{prose}\n\n{block}\n\n{table}", 40, "")
    lines = text.splitlines()
    assert max(len(line) for line in lines[:4]) <= 40
    assert "examples:\n  # then each change\n  gpuctl nodes -w\n\n  gpuctl nodes" in text
    assert text.endswith(table)


def test_a_broken_example_is_caught() -> None:
    epilog = examples(("gpuctl nodes --no-such-flag", "")) + "\n\nexit codes: 0"
    [shown] = example_commands(epilog)
    with pytest.raises(SystemExit):
        build_parser().parse_args(shlex.split(shown)[1:])
