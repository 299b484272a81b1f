"""How every `gpuctl` command's `--help` is laid out, kubectl's way: prose paragraphs wrapped
to the terminal, and the blocks that are laid out by hand kept as written: a block headed
`examples:`, `columns:` or the like, or indented lines (commands to copy, tables).

`lay_out_help` gives it to every command of the tree once the tree is built.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence


def _laid_out_by_hand(paragraph: str) -> bool:
    lines = paragraph.splitlines()
    headed = lines[0].rstrip().endswith(":") and len(lines) > 1
    return headed or any(line.startswith(" ") for line in lines)


class KubectlHelpFormatter(argparse.HelpFormatter):
    """Wraps prose paragraphs (separated by a blank line); keeps blocks laid out by hand."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = text.strip("\n").split("\n\n")
        out = []
        for paragraph in paragraphs:
            if _laid_out_by_hand(paragraph):
                out.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                joined = " ".join(paragraph.split())
                out.append(
                    textwrap.fill(joined, width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n\n".join(out)


def lay_out_help(parser: argparse.ArgumentParser) -> None:
    """Give `parser` and every subcommand under it KubectlHelpFormatter (argparse reads a
    parser's formatter_class only when it formats its help)."""
    parser.formatter_class = KubectlHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                lay_out_help(child)


def examples(*lines: tuple[str, str]) -> str:
    """An `examples:` block, kubectl's: each (command, what it does), the words as a comment
    above the command."""
    body = "\n".join(
        f"  # {words}\n  {command}\n" if words else f"  {command}\n" for command, words in lines
    )
    return "examples:\n" + body.rstrip("\n")


def with_examples(epilog: str, block: str) -> str:
    """`block` (examples) first, then the epilog's own paragraphs (exit codes...)."""
    return block + ("\n\n" + epilog if epilog else "")


def example_commands(epilog: str | None) -> Sequence[str]:
    """The commands an epilog's examples block shows (for the test that runs each through
    the parser): its indented lines that are not comments, up to the next prose paragraph."""
    if not epilog or "examples:\n" not in epilog:
        return []
    commands = []
    for line in epilog.split("examples:\n", 1)[1].splitlines():
        if line and not line.startswith(" "):
            break
        if line.strip() and not line.strip().startswith("#"):
            commands.append(line.strip())
    return commands
