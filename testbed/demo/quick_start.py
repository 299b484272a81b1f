"""docs/getting-started.md's quick start, read from the page itself: its commands in order,
the output it shows for them, and the file it asks for; for the test that runs them on the
demo's system (tests/integration/demo/test_quick_start.py). The page is the only copy.

How the page is read (plain Markdown, nothing in it is there for the test):
- `## N. Title` starts a section;
- an indented code block (4 spaces) holds commands, one a line (a line ending in a backslash
  goes on on the next, `#` starts a comment), or a transcript (`$ COMMAND`, then the output
  shown for it), or output alone: the end of what the command before it printed (a later
  section showing how a watch can end);
- a ```yaml fence is a file's text: the file the next `kubectl apply -f FILE` names.
A line is a command when it starts with one of PROGRAMS. A block mixing commands with other
lines is refused, so a command of another kind the page gains reads as neither, and fails.

`unmatched` compares shown output with what a command printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PROGRAMS = ("kubectl ", "gpuctl ", "helm ", "docker ", "hack/")
ELLIPSIS = "..."
# The page's example of the digest a KMM version ends with (v7.1.4.6_260728.7-1a2b3c4d); the
# real one is the GPUDriver's config's.
EXAMPLE_DIGEST = "1a2b3c4d"
SECTION = re.compile(r"^## (.+)$")
APPLIED_FILE = re.compile(r"\bkubectl apply -f (\S+)")


class PageError(ValueError):
    """The page says something this reading cannot place."""


@dataclass
class Command:
    section: str
    text: str  # as typed: continuation lines joined, without the comment
    comment: str = ""
    shown: list[str] = field(default_factory=list)  # the output the page shows for it


@dataclass(frozen=True)
class File:
    section: str
    name: str
    text: str


Step = Command | File


def _is_command(line: str) -> bool:
    return line.startswith(PROGRAMS)


def _split_comment(line: str) -> tuple[str, str]:
    text, _, comment = line.partition(" #")
    return text.strip(), comment.strip()


def _joined(lines: list[str]) -> list[str]:
    """Lines with their backslash continuations joined."""
    joined: list[str] = []
    carry = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            carry += line.rstrip()[:-1] + " "
            continue
        joined.append(carry + line)
        carry = ""
    if carry:
        raise PageError(f"a command ends in a backslash: {carry!r}")
    return joined


def _commands(section: str, lines: list[str], steps: list[Step]) -> None:
    """One code block's steps appended to `steps`."""
    if any(line.startswith("$ ") for line in lines):
        for line in lines:
            if line.startswith("$ "):
                steps.append(Command(section, *_split_comment(line[2:])))
            elif not steps or not isinstance(steps[-1], Command):
                raise PageError(f"{section}: output before any command: {line!r}")
            else:
                steps[-1].shown.append(line.rstrip())
        return
    kinds = {_is_command(line) for line in _joined(lines) if line.strip()}
    if kinds == {True}:
        steps.extend(Command(section, *_split_comment(line)) for line in _joined(lines))
        return
    if kinds == {False}:
        previous = [step for step in steps if isinstance(step, Command)]
        if not previous:
            raise PageError(f"{section}: output before any command: {lines!r}")
        previous[-1].shown.extend(line.rstrip() for line in lines)
        return
    raise PageError(f"{section}: a block mixes commands with other lines: {lines!r}")


def _blocks(markdown: str) -> list[tuple[str, str, list[str]]]:
    """(section, "shell" or the fence's language, lines) of each code block, in order."""
    blocks: list[tuple[str, str, list[str]]] = []
    section = ""
    lines = markdown.splitlines()
    index = 0
    previous_blank = True
    while index < len(lines):
        line = lines[index]
        heading = SECTION.match(line)
        if heading:
            section = heading.group(1)
        if line.startswith("```"):
            end = lines.index("```", index + 1)
            blocks.append((section, line[3:].strip(), lines[index + 1 : end]))
            index, previous_blank = end + 1, False
            continue
        if previous_blank and line.startswith("    "):
            block = []
            while index < len(lines) and (lines[index].startswith("    ") or not lines[index]):
                block.append(lines[index][4:])
                index += 1
            while block and not block[-1].strip():
                block.pop()
            blocks.append((section, "shell", block))
            previous_blank = False
            continue
        previous_blank = not line.strip()
        index += 1
    return blocks


def read_steps(markdown: str) -> list[Step]:
    """The page's commands and files, in order (a file before the command that applies it)."""
    steps: list[Step] = []
    files: list[tuple[str, list[str]]] = []  # fenced texts waiting for their command
    for section, language, lines in _blocks(markdown):
        if language == "yaml":
            files.append((section, lines))
            continue
        if language != "shell":
            raise PageError(f"{section}: a ```{language} block: neither commands nor a file")
        start = len(steps)
        _commands(section, lines, steps)
        for step in steps[start:]:
            applied = APPLIED_FILE.search(step.text) if isinstance(step, Command) else None
            if applied and files:
                where, text = files.pop(0)
                steps.insert(steps.index(step), File(where, applied.group(1), "\n".join(text)))
    if files:
        raise PageError(f"a yaml block no `kubectl apply -f` applies: {files[0][0]}")
    return steps


def _pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern: `...` (and the space before it) stands for anything, the
    example digest for any digest."""
    parts = [re.escape(part) for part in re.split(r"\s*" + re.escape(ELLIPSIS), shown.rstrip())]
    text = ".*".join(parts).replace(EXAMPLE_DIGEST, "[0-9a-f]{8}")
    return re.compile(text + r"\s*")


def unmatched(shown: list[str], printed: list[str]) -> str | None:
    """None when the command printed what the page shows; else the first shown line it did not
    print. Shown lines are found in order, each after the one before (a line `...` alone
    stands for any lines: it is skipped), and the last shown line is the last line printed:
    the command ended there."""
    wanted = [line for line in shown if line.strip() != ELLIPSIS]
    at = 0
    for line in wanted:
        pattern = _pattern(line)
        while at < len(printed) and not pattern.fullmatch(printed[at]):
            at += 1
        if at == len(printed):
            return f"not printed (in order): {line!r}"
        at += 1
    if wanted and at != len(printed):
        return f"not the last line printed: {wanted[-1]!r} (then {printed[at:]!r})"
    return None
