"""The flag tables in README.md and docs/, from the argparse definitions of the three programs.

A doc asks for a table with a block `<!-- generated: COMMAND flags -->` ... `<!-- end
generated -->`, where COMMAND is a program (`gpuctl-agent`, `gpuctl-coordinator`, `gpuctl`) or
one of its subcommands (`gpuctl-agent run`); the block gets that command's arguments and
those of every subcommand below it, each under a heading when there are several. Every
command with arguments must be in exactly one block, so a new subcommand cannot go
undocumented. To change a table, change the parser's help text and regenerate.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from agent.__main__ import build_parser as agent_parser
from coordinator.main import build_parser as coordinator_parser
from gpuctl.cli.main import build_parser as cli_parser
from hack.generators import Generator, GeneratorError, Output
from hack.generators.doc_blocks import END, block_names, fill_blocks, start_marker
from hack.generators.flag_tables import command_help, command_tree, parser_tables, subcommands

PROGRAMS: tuple[Callable[[], argparse.ArgumentParser], ...] = (
    agent_parser,
    coordinator_parser,
    cli_parser,
)
SUFFIX = " flags"


def docs(repo: Path) -> list[Path]:
    """The Markdown files that may hold generated blocks, relative to `repo`."""
    found = [Path("README.md")] if (repo / "README.md").is_file() else []
    return found + sorted(p.relative_to(repo) for p in (repo / "docs").rglob("*.md"))


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command of every program by its full name (`gpuctl rollout status`)."""
    return {p.prog: p for program in PROGRAMS for p in command_tree(program())}


def _helps(commands: dict[str, argparse.ArgumentParser]) -> dict[str, str]:
    helps = {}
    for parent in commands.values():
        for sub in subcommands(parent):
            helps[sub.prog] = command_help(sub, parent)
    return helps


def _sentence(text: str) -> str:
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else f"{text}."


def block_body(command: argparse.ArgumentParser, helps: dict[str, str]) -> str:
    tree = [p for p in command_tree(command) if parser_tables(p)]
    if tree == [command] and not subcommands(command):
        return f"\n{parser_tables(command)}\n"
    sections = []
    for parser in tree:
        intro = f"{_sentence(helps[parser.prog])}\n\n" if helps.get(parser.prog) else ""
        sections.append(f"### `{parser.prog}`\n\n{intro}{parser_tables(parser)}")
    return "\n" + "\n".join(sections) + "\n"


def outputs(repo: Path) -> list[Output]:
    commands = _commands()
    helps = _helps(commands)
    bodies = {f"{name}{SUFFIX}": block_body(parser, helps) for name, parser in commands.items()}
    covered: dict[str, str] = {}  # command name -> the doc whose block lists it
    results = []
    for doc in docs(repo):
        text = (repo / doc).read_text(encoding="utf-8")
        names = block_names(text)
        if not names:
            continue
        for name in names:
            if name not in bodies:
                continue  # fill_blocks names the unknown block, with the line
            for parser in command_tree(commands[name.removesuffix(SUFFIX)]):
                if parser.prog in covered:
                    raise GeneratorError(
                        f"{doc}: the flags of `{parser.prog}` are already in a block in "
                        f"{covered[parser.prog]}; keep one"
                    )
                covered[parser.prog] = str(doc)
        results.append(Output(doc, fill_blocks(text, bodies, str(doc)).encode()))
    missing = [name for name, p in commands.items() if parser_tables(p) and name not in covered]
    if missing:
        raise GeneratorError(
            f"no doc lists the flags of {', '.join(missing)}: add a block "
            f"{start_marker('COMMAND' + SUFFIX)} ... {END} for each (or for a command above "
            "it) to README.md or a doc in docs/"
        )
    return results


GENERATOR = Generator(
    source="the argparse help in agent/, coordinator/ and gpuctl/cli/ (its flag tables)",
    outputs=outputs,
)
