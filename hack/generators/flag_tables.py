"""Markdown tables of an argparse parser's arguments: flag, default, meaning.

Everything comes from the parser itself, so the tables say what `--help` says:
- the flag column is the option strings and the metavar (or choices) as `--help` shows them;
- the meaning is the help text with %(default)s and friends filled in, as argparse does;
- the default is taken out of the help when the help states it (a `default: X` part of a
  parenthesis, e.g. "(default: 300)" or "(sent in Welcome; default: 60)"), since the words
  often say more than the value ("$NODE_NAME, else the host's hostname"); otherwise it is
  `required`, `off` for a switch, the parser's default value, or empty when there is none.
Pure: a parser in, text out. argparse has no public API to walk a parser, so this reads its
`_actions`, `_action_groups` and `_choices_actions`, as argparse's own help formatter does.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass

from hack.generators import GeneratorError

_DEFAULT_PART = re.compile(r"^default:? ")
_DEFAULT_GROUP_TITLES = ("positional arguments", "options", "optional arguments")


@dataclass(frozen=True)
class Row:
    flag: str
    default: str
    meaning: str


def _expanded_help(action: argparse.Action, prog: str) -> str:
    """The help text with %(...)s filled in the way argparse's HelpFormatter does."""
    text = action.help or ""
    params = dict(vars(action), prog=prog)
    for name, value in list(params.items()):
        if value is argparse.SUPPRESS:
            del params[name]
        elif hasattr(value, "__name__"):
            params[name] = value.__name__
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return " ".join((text % params).split())


def _parentheses(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every outermost parenthesis in `text`, end exclusive."""
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char == "(":
            if depth == 0:
                start = index
            depth += 1
        elif char == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                yield start, index + 1


def split_default(help_text: str) -> tuple[str, str | None]:
    """(the help without its default part, the stated default or None)."""
    stated: list[tuple[int, int, list[str], int]] = []
    for start, end in _parentheses(help_text):
        parts = help_text[start + 1 : end - 1].split("; ")
        stated += [(start, end, parts, i) for i, p in enumerate(parts) if _DEFAULT_PART.match(p)]
    if not stated:
        return help_text, None
    if len(stated) > 1:
        raise GeneratorError(f"help states its default more than once: {help_text!r}")
    start, end, parts, index = stated[0]
    default = _DEFAULT_PART.sub("", parts.pop(index), count=1)
    before, after = help_text[:start], help_text[end:]
    if parts:
        return f"{before}({'; '.join(parts)}){after}", default
    return f"{before.rstrip()}{after}".strip(), default


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _code(text: str) -> str:
    """`text` as code in a table cell (where even a code span must escape the pipe)."""
    return "`" + text.replace("|", "\\|") + "`"


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        metavar = _metavar(action)
        return _code(f"[{metavar}]" if action.nargs == argparse.OPTIONAL else metavar)
    names = list(action.option_strings)
    if action.nargs is None:
        names[-1] = f"{names[-1]} {_metavar(action)}"
    elif action.nargs == argparse.OPTIONAL:  # --dry-run[=client]: the value may be left out
        names[-1] = f"{names[-1]}[={_metavar(action)}]"
    elif action.nargs != 0:
        raise GeneratorError(f"{action.option_strings}: nargs={action.nargs!r} is not described")
    return ", ".join(_code(name) for name in names)


def _value_text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _cell(text: str) -> str:
    """Prose for a table cell: no pipes or HTML-looking brackets left to misread."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _default(action: argparse.Action, stated: str | None) -> str:
    literal = None if action.default in (None, argparse.SUPPRESS) else _value_text(action.default)
    if stated is not None:
        return _code(stated) if stated == literal else _cell(stated)
    if action.required:
        return "required"
    if action.nargs == 0:
        return "off" if action.default is False else ""
    return "" if literal is None else _code(literal)


def rows(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[Row]:
    out = []
    for action in actions:
        meaning, stated = split_default(_expanded_help(action, parser.prog))
        out.append(Row(_flag(action), _default(action, stated), _cell(meaning)))
    return out


def documented_actions(group: argparse._ArgumentGroup) -> list[argparse.Action]:
    """The group's arguments a table lists: not --help, not subcommands."""
    return [
        action
        for action in group._group_actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
    ]


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.extend(dict.fromkeys(action.choices.values()))  # aliases once
    return found


def _table(table_rows: list[Row]) -> str:
    lines = ["| flag | default | meaning |", "|---|---|---|"]
    lines += [f"| {r.flag} | {r.default} | {r.meaning} |" for r in table_rows]
    return "\n".join(lines) + "\n"


def parser_tables(parser: argparse.ArgumentParser) -> str:
    """The parser's own arguments: one table for the ungrouped ones, then one per named
    argument group under its title. Empty when it has none."""
    general: list[Row] = []
    named: list[str] = []
    for group in parser._action_groups:
        actions = documented_actions(group)
        if not actions:
            continue
        if group.title in _DEFAULT_GROUP_TITLES:
            general += rows(parser, actions)
        else:
            named.append(f"*{_cell(group.title or '')}*\n\n{_table(rows(parser, actions))}")
    parts = ([_table(general)] if general else []) + named
    return "\n".join(parts)


def command_tree(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every subcommand below it, depth first, in definition order."""
    tree = [parser]
    for sub in subcommands(parser):
        tree += command_tree(sub)
    return tree


def command_help(parser: argparse.ArgumentParser, parent: argparse.ArgumentParser) -> str:
    """The one-line help the parent's subcommand list gives `parser`, or ''."""
    for action in parent._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if action.choices.get(choice.dest) is parser:
                    return choice.help or ""
    return ""
