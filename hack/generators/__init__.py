"""The generators `hack/generate.py` runs: each turns one source of truth into committed files.

A generator says which files it wants (path and exact content) and, optionally, which files in
the checkout it claims, so that one it no longer makes is found and removed. It never writes:
`hack/generate.py` compares, writes, or (with `--check`) reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class GeneratorError(Exception):
    """A generator cannot run on this checkout (e.g. a broken marker); the text says why."""


@dataclass(frozen=True)
class Output:
    """One file as its generator wants it; `path` is relative to the repository. `source`,
    when given, says what this file is made from more precisely than its generator's."""

    path: Path
    content: bytes
    source: str = ""


def _claims_nothing(_repo: Path) -> set[Path]:
    return set()


@dataclass(frozen=True)
class Generator:
    """`outputs(repo)` are the wanted files; `claimed(repo)` the files of the checkout this
    generator owns (any of them not among its outputs is left over). `source` names what the
    files are generated from, for messages."""

    source: str
    outputs: Callable[[Path], list[Output]]
    claimed: Callable[[Path], set[Path]] = field(default=_claims_nothing)
