"""Generated blocks inside hand-written Markdown: find them by name and replace their bodies.

A block is the lines between `<!-- generated: NAME -->` and `<!-- end generated -->`, each
marker on a line of its own. Everything outside the markers is left exactly as it is; the
body is replaced whole. Pure text in, text out, so the rules are tested without files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hack.generators import GeneratorError

START = re.compile(r"^<!-- generated: (?P<name>[^>]+?) -->$")
END = "<!-- end generated -->"


def start_marker(name: str) -> str:
    return f"<!-- generated: {name} -->"


def block_names(text: str) -> list[str]:
    """The names of the blocks in `text`, in order."""
    return [m["name"] for line in text.splitlines() if (m := START.match(line))]


def fill_blocks(text: str, bodies: Mapping[str, str], where: str) -> str:
    """`text` with the body of every block replaced by `bodies[name]` (which ends with a
    newline). GeneratorError, naming `where`, for an unknown name, a start without its end,
    or an end without its start."""
    out: list[str] = []
    open_block: str | None = None
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.rstrip("\n")
        start = START.match(stripped)
        if open_block is None:
            if stripped == END:
                raise GeneratorError(f"{where}:{number}: {END} without a generated block")
            out.append(line)
            if start:
                open_block = start["name"]
                if open_block not in bodies:
                    known = ", ".join(sorted(bodies))
                    raise GeneratorError(
                        f"{where}:{number}: no generated block is called {open_block!r} "
                        f"(known: {known})"
                    )
                out.append(bodies[open_block])
        elif stripped == END:
            out.append(line)
            open_block = None
        elif start:
            raise GeneratorError(f"{where}:{number}: a generated block starts inside another")
    if open_block is not None:
        raise GeneratorError(f"{where}: generated block {open_block!r} has no {END}")
    return "".join(out)
