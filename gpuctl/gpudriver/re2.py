"""Kernel-mapping regexps as KMM reads them: Go's RE2, checked and run with Python's `re`.

KMM compiles `kernelMappings[].regexp` with Go's `regexp` package (RE2 syntax;
internal/webhook/module.go refuses what does not compile, internal/module/kernelmapper.go
searches the node's kernel with it). Python's `re` is not RE2, and where the two read a pattern
differently gpuctl could think a node is served by a mapping KMM does not match (or the
reverse). So gpuctl accepts only what both read alike:

- `refusal` says why Go refuses a pattern Python may accept (lookarounds, backreferences,
  `\\Z`, atomic groups, possessive quantifiers, escapes and flags Go does not have, a repeat
  count over 1000): gpuctl refuses it as KMM's webhook does;
- `divergence` says why a pattern Go accepts is read differently by Python (`x{,n}` is a
  repetition in Python and literal text in Go; POSIX classes `[[:alpha:]]`; `\\pL`, `\\Q..\\E`,
  `\\x{..}`, `\\C`; the ungreedy flag `U`; `(?<name>..)`; a flag turned off for the rest of the
  pattern; a class range from `\\d`): gpuctl refuses it too, saying how to write it;
- `to_python` turns what is left into the `re` pattern that matches the same kernels (`\\z` →
  `\\Z`; `$` without the `m` flag → `\\Z`, as Go's `$` is the end of text), and `compiled` uses
  `re.ASCII`, as Go's `\\d`, `\\w`, `\\s` and `\\b` are ASCII.

Each function scans the pattern once, stepping over escapes and bracketed classes, so an
escaped `\\(` or a `[(?=]` class is not taken for syntax. tests/gpudriver/test_re2_against_go.py
runs every verdict against Go's own `regexp` package.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

# Compiled patterns kept (compiled): a cluster's GPUDrivers have a few kernel mappings each.
COMPILED_KEPT = 256

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


# Escaped letters Go's regexp/syntax knows; any other escaped letter is refused by Go.
_GO_LETTER_ESCAPES = frozenset("aftnrvxAbBzdDsSwWpPQEC")
# Of those, the ones Python's `re` does not have (or reads otherwise).
_GO_ONLY_ESCAPES = {
    "\\p": "\\p (a Unicode class in RE2; Python's re has none)",
    "\\P": "\\P (a negated Unicode class in RE2; Python's re has none)",
    "\\Q": "\\Q...\\E (quoting in RE2; Python's re has none: escape each character)",
    "\\C": "\\C (any byte in RE2; Python's re has none)",
}
_CLASS_ESCAPES = frozenset({"\\d", "\\D", "\\s", "\\S", "\\w", "\\W", "\\p", "\\P"})
_GO_FLAGS = frozenset("imsU")
_MAX_REPEAT = 1000  # Go's regexp/syntax refuses a larger repeat count
_FLAGS = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?([:)])")
_REPEAT = re.compile(r"\{(\d*)(,?)(\d*)\}")
_POSIX_CLASS = re.compile(r"\[:\^?[A-Za-z]+:\]")


def _flags_at(pattern: str, index: int) -> tuple[str, str, str] | None:
    """(flags on, flags off, ':' or ')') of a `(?flags...` group at `index`, or None."""
    found = _FLAGS.match(pattern, index)
    if found is None or not (found.group(1) or found.group(2) is not None):
        return None
    return found.group(1), found.group(2) or "", found.group(3)


def _repeat_problem(pattern: str, index: int) -> str | None:
    """Go's refusal of a `{n,m}` repeat count at `index` over its limit, or None."""
    found = _REPEAT.match(pattern, index)
    if found is None or not (found.group(1) or found.group(3)):
        return None
    counts = [int(c) for c in (found.group(1), found.group(3)) if c]
    if max(counts) > _MAX_REPEAT:
        return f"a repeat count over {_MAX_REPEAT} ({found.group(0)})"
    return None


def _refused_escape(piece: str, in_class: bool) -> str | None:
    if len(piece) != 2:
        return None
    letter = piece[1]
    if letter.isascii() and letter.isalpha() and letter not in _GO_LETTER_ESCAPES:
        return (
            "\\Z (RE2 spells the end of text \\z)"
            if letter == "Z" and not in_class
            else (f"the escape {piece}, which RE2 does not have")
        )
    if letter in "123456789":
        return f"the escape {piece}, which RE2 does not have" if in_class else "backreferences"
    return None


def _refused_group(pattern: str, index: int) -> str | None:
    """Go's refusal of the `(?...` group at `index`, or None."""
    for prefix, name in _GROUP_REFUSALS:
        if pattern.startswith(prefix, index + 2):
            return name + "s"
    flags = _flags_at(pattern, index)
    unknown = sorted(set("".join(flags[:2])) - _GO_FLAGS) if flags else []
    return f"the flag {unknown[0]!r} (RE2 has only i, m, s and U)" if unknown else None


def refusal(pattern: str) -> str | None:
    """Why Go's RE2 refuses ``pattern`` for a construct Python's `re` has, or None."""
    for index, piece, in_class in _tokens(pattern):
        problem = _refused_escape(piece, in_class)
        if problem is None and not in_class:
            if piece == "(" and pattern.startswith("(?", index):
                problem = _refused_group(pattern, index)
            elif piece in "*+?}" and pattern[index + 1 : index + 2] == "+":
                problem = "possessive quantifiers"
            elif piece == "{":
                problem = _repeat_problem(pattern, index)
        if problem:
            return problem
    return None


def _class_ambiguity(pattern: str) -> str | None:
    """A '[' inside a class, or a doubled `&&`, `--`, `~~`, `||` there: one character in RE2,
    what Python's `re` warns it will read as a nested set or a set operation."""
    inside, start = False, -1
    for index, piece, _ in _tokens(pattern):
        if not inside:
            if piece == "[":
                inside, start = True, index
            continue
        at_start = index == start + 1 or (index == start + 2 and pattern[start + 1] == "^")
        if piece == "]" and not at_start:
            inside = False
        elif piece == "[":
            return "a '[' inside a class (Python may read a nested set): write \\["
        elif piece in "&-~|" and pattern[index + 1 : index + 2] == piece:
            return f"{piece * 2} inside a class (Python may read a set operation): escape one"
    return None


def _diverging_range(pattern: str, index: int, piece: str, before: str) -> str | None:
    """A class range from or to a class escape such as `\\d` at `index`: a literal '-' in Go,
    an error in Python."""
    after = pattern[index + len(piece) : index + len(piece) + 2]
    from_escape = piece in _CLASS_ESCAPES and after[:1] == "-" and after[1:] not in ("", "]")
    to_escape = (
        piece == "-"
        and before not in ("[", "^")
        and pattern[index + 1 : index + 3] in _CLASS_ESCAPES
    )
    if from_escape or to_escape:
        return (
            "a class range from or to a class escape such as \\d (a literal '-' in RE2, "
            "refused by Python): put the '-' last"
        )
    return None


def _diverging_group(pattern: str, index: int) -> str | None:
    """How Python reads the `(?...` group at `index` otherwise than Go, or None."""
    if pattern[index + 2 : index + 3] == "<" and pattern[index + 3 : index + 4] not in ("=", "!"):
        return (
            "(?<name>...) (a named group in RE2, refused by Python before 3.14): write "
            "(?P<name>...)"
        )
    flags = _flags_at(pattern, index)
    if flags and "U" in flags[0] + flags[1]:
        return "the ungreedy flag U (RE2 only): write lazy quantifiers such as *? instead"
    if flags and flags[1] and flags[2] == ")":
        return (
            "a flag turned off for the rest of the pattern, (?-i) (RE2 only): scope it, (?-i:...)"
        )
    return None


def _diverging_piece(
    pattern: str, index: int, piece: str, in_class: bool, before: str
) -> str | None:
    if piece in _GO_ONLY_ESCAPES:
        return _GO_ONLY_ESCAPES[piece]
    if piece == "\\x" and pattern.startswith("{", index + 2):
        return "\\x{..} (a hex escape in RE2, refused by Python): write \\xNN"
    if in_class:
        return _diverging_range(pattern, index, piece, before)
    if piece == "{" and pattern.startswith(",", index + 1) and _REPEAT.match(pattern, index):
        return "x{,n} (a repetition in Python, the literal text '{,n}' in RE2): write x{0,n}"
    if piece == "(" and pattern.startswith("(?", index):
        return _diverging_group(pattern, index)
    return None


def divergence(pattern: str) -> str | None:
    """Why Go's RE2 and Python's `re` read ``pattern`` (which Go accepts) differently, or
    None. Call after `refusal` found nothing."""
    if _POSIX_CLASS.search(pattern):
        return (
            "a POSIX class such as [[:alpha:]] (a class in RE2, single characters in Python): "
            "write [a-zA-Z] or [0-9]"
        )
    problem = _class_ambiguity(pattern)
    before = ""
    for index, piece, in_class in _tokens(pattern):
        problem = problem or _diverging_piece(pattern, index, piece, in_class, before)
        before = piece
    return problem


def _multiline(pattern: str) -> bool:
    return any(
        piece == "(" and (flags := _flags_at(pattern, index)) is not None and "m" in flags[0]
        for index, piece, in_class in _tokens(pattern)
        if not in_class
    )


def to_python(pattern: str) -> str:
    """The `re` pattern that matches what the RE2 ``pattern`` matches: `\\z` → `\\Z`, and
    without the `m` flag `$` → `\\Z` (Go's `$` is the end of text; Python's also matches
    before a final newline)."""
    end_of_text = () if _multiline(pattern) else ("$",)
    return "".join(
        "\\Z" if not in_class and (piece == "\\z" or piece in end_of_text) else piece
        for _, piece, in_class in _tokens(pattern)
    )


@functools.lru_cache(maxsize=COMPILED_KEPT)
def compiled(pattern: str) -> re.Pattern[str]:
    """The pattern compiled as KMM's Go reads it (ASCII classes), kept for the next call: a
    rollout's passes and the reconciler match nodes' kernels, and translating the pattern anew
    each time was 4.6 % of the coordinator's CPU in a 1,000-node rollout (docs/benchmarks.md).
    Raises re.error (never kept)."""
    return re.compile(to_python(pattern), re.ASCII)


def search(pattern: str, text: str) -> bool:
    """RE2's `MatchString`: an unanchored search. Raises re.error for what does not compile."""
    return compiled(pattern).search(text) is not None
