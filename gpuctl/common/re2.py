"""Kernel-mapping regexps as KMM reads them: Go's RE2, checked and run with Python's `re`.

KMM compiles `kernelMappings[].regexp` with Go's `regexp` package (RE2 syntax;
internal/webhook/module.go refuses what does not compile, internal/module/kernelmapper.go
searches the node's kernel with it). Python's `re` is not RE2: it accepts lookarounds,
backreferences, `\\Z`, atomic groups and possessive quantifiers, which RE2 refuses, and it
refuses RE2's end-of-text `\\z` (before Python 3.14). `refusal` says why RE2 would refuse a
pattern; `to_python` turns an RE2 pattern into the `re` pattern that matches the same kernels.
Both scan the pattern once, stepping over escapes and bracketed classes, so an escaped `\\(`
or a `[(?=]` class is not taken for syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# What follows "(?" in constructs RE2 does not have.
_GROUP_REFUSALS = (
    ("=", "lookahead"),
    ("!", "negative lookahead"),
    ("<=", "lookbehind"),
    ("<!", "negative lookbehind"),
    (">", "atomic group"),
    ("P=", "named backreference"),
    ("(", "conditional"),
)


def _tokens(pattern: str) -> Iterator[tuple[int, str, bool]]:
    """(index, piece, in a bracketed class): an escape is one piece of two characters."""
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            yield index, pattern[index : index + 2], in_class
            index += 2
            continue
        if in_class:
            class_start = pattern[index - 1] == "[" or pattern[index - 2 : index] == "[^"
            if char == "]" and not class_start:
                in_class = False
        elif char == "[":
            in_class = True
        yield index, char, in_class and char != "["
        index += 1


def refusal(pattern: str) -> str | None:
    """Why RE2 refuses ``pattern`` for a construct Python's `re` has, or None."""
    for index, piece, in_class in _tokens(pattern):
        if in_class:
            continue
        if len(piece) == 2 and piece[1] in "123456789":
            return "backreferences"
        if piece == "\\Z":
            return "\\Z (RE2 spells the end of text \\z)"
        if piece == "(" and pattern.startswith("(?", index):
            for prefix, name in _GROUP_REFUSALS:
                if pattern.startswith(prefix, index + 2):
                    return name + "s"
        if piece in "*+?}" and pattern[index + 1 : index + 2] == "+":
            return "possessive quantifiers"
    return None


def to_python(pattern: str) -> str:
    """The `re` pattern that matches what the RE2 ``pattern`` matches (``\\z`` → ``\\Z``)."""
    return "".join(
        "\\Z" if piece == "\\z" and not in_class else piece
        for _, piece, in_class in _tokens(pattern)
    )


def search(pattern: str, text: str) -> bool:
    """RE2's `MatchString`: an unanchored search. Raises re.error for what does not compile."""
    return re.search(to_python(pattern), text) is not None
