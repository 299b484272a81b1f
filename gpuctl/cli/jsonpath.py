"""kubectl's `-o jsonpath=TEMPLATE` and the paths of `-o custom-columns=`, over plain data (pure).

The dialect is kubectl's (client-go util/jsonpath, as `kubectl get -o jsonpath` documents it),
so a template an admin already uses on `kubectl get` works on gpuctl's output unchanged:

- text outside `{...}` is printed as it is; `{"\\n"}` and `{'\\t'}` print a literal;
- a path: `.field` (a `\\.` in a name is a dot: `.metadata.labels.gpuctl\\.dev/state`), `..field`
  (anywhere below), `.*` and `[*]` (every member), `[N]` (negative from the end),
  `[start:end]`, `['a','b']`, and a filter `[?(@.type=="Ready")]` (`==`, `!=`, `<`, `<=`,
  `>`, `>=` against a quoted string, a number, `true` or `false`; `[?(@.field)]`: present);
  `$` or `@` at a path's start is the root (in a range, the current item);
- `{range PATH}...{end}` prints its body once per value, with the value as the root;
- the values of one `{...}` are joined by a space; a string prints as it is, anything else as
  JSON; a key that is missing prints nothing (kubectl's default, --allow-missing-template-keys).

`JSONPathError` says what is wrong with a template and where.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


class JSONPathError(ValueError):
    """A template kubectl's JSONPath would not parse either, and why."""


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Path:
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Range:
    path: Path
    body: tuple[Node, ...]


@dataclass(frozen=True)
class Step:
    """One step of a path: `kind` is field, recurse, all, index, slice, union or filter."""

    kind: str
    names: tuple[str, ...] = ()
    numbers: tuple[int | None, ...] = ()
    filter: Filter | None = None


@dataclass(frozen=True)
class Filter:
    path: Path
    operator: str = ""
    value: Any = None


Node = Text | Path | Range

_FILTER = re.compile(r"^\?\((.*)\)$", re.S)
_COMPARISON = re.compile(r"^(@[^=!<>]*?)\s*(==|!=|<=|>=|<|>)\s*(.+)$", re.S)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def parse(template: str) -> tuple[Node, ...]:
    """The template's text, paths and ranges; JSONPathError on what kubectl would refuse."""
    nodes, rest = _parse_block(template, 0, in_range=False)
    if rest != len(template):
        raise JSONPathError(f"{{end}} at {rest} closes no {{range}}")
    return nodes


def _parse_block(template: str, at: int, *, in_range: bool) -> tuple[tuple[Node, ...], int]:
    nodes: list[Node] = []
    while at < len(template):
        open_at = template.find("{", at)
        if open_at < 0:
            nodes.append(Text(template[at:]))
            at = len(template)
            break
        if open_at > at:
            nodes.append(Text(template[at:open_at]))
        close_at = _closing_brace(template, open_at)
        inside = template[open_at + 1 : close_at].strip()
        at = close_at + 1
        if inside == "end":
            if not in_range:
                raise JSONPathError(f"{{end}} at {open_at} closes no {{range}}")
            return tuple(nodes), at
        if inside.startswith("range ") or inside == "range":
            body, at = _parse_block(template, at, in_range=True)
            nodes.append(Range(parse_path(inside[len("range") :].strip()), body))
            continue
        if inside[:1] in ("'", '"'):
            nodes.append(Text(_string(inside)))
            continue
        nodes.append(parse_path(inside))
    if in_range:
        raise JSONPathError("a {range} has no {end}")
    return tuple(nodes), at


def _closing_brace(template: str, open_at: int) -> int:
    quote = ""
    for index in range(open_at + 1, len(template)):
        char = template[index]
        if quote:
            if char == "\\":
                continue
            if char == quote and template[index - 1] != "\\":
                quote = ""
        elif char in ("'", '"'):
            quote = char
        elif char == "}":
            return index
    raise JSONPathError(f"the {{ at {open_at} is not closed")


def _string(literal: str) -> str:
    quote = literal[0]
    if len(literal) < 2 or literal[-1] != quote:
        raise JSONPathError(f"unterminated string {literal}")
    body = literal[1:-1]
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), body)


def parse_path(text: str) -> Path:
    """A path alone (`.status.phase`, `{.status.phase}` or `status.phase`, as custom-columns
    take it)."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text[:1] in ("$", "@"):
        text = text[1:]
    if text and text[0] not in ".[":
        text = "." + text
    return Path(tuple(_steps(text)))


def _steps(text: str) -> Iterator[Step]:
    at = 0
    while at < len(text):
        if text.startswith("..", at):
            name, at = _name(text, at + 2)
            yield Step("recurse", (name,))
        elif text[at] == ".":
            name, at = _name(text, at + 1)
            yield Step("all") if name == "*" else Step("field", (name,))
        elif text[at] == "[":
            close = _closing_bracket(text, at)
            yield _bracket(text[at + 1 : close].strip(), text)
            at = close + 1
        else:
            raise JSONPathError(f"unexpected {text[at]!r} at {at} in {text!r}")


def _name(text: str, at: int) -> tuple[str, int]:
    chars = []
    while at < len(text) and text[at] not in ".[":
        if text[at] == "\\" and at + 1 < len(text):
            at += 1
        chars.append(text[at])
        at += 1
    if not chars:
        raise JSONPathError(f"a name is missing at {at} in {text!r}")
    return "".join(chars), at


def _closing_bracket(text: str, open_at: int) -> int:
    depth, quote = 0, ""
    for index in range(open_at, len(text)):
        char = text[index]
        if quote:
            if char == quote and text[index - 1] != "\\":
                quote = ""
        elif char in ("'", '"'):
            quote = char
        elif char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
            if depth == 0:
                return index
    raise JSONPathError(f"the [ at {open_at} is not closed in {text!r}")


def _bracket(inside: str, text: str) -> Step:
    if inside == "*":
        return Step("all")
    filtered = _FILTER.match(inside)
    if filtered:
        return Step("filter", filter=_filter(filtered.group(1).strip()))
    if inside[:1] in ("'", '"'):
        return Step("union", tuple(_string(part.strip()) for part in _split_names(inside)))
    try:
        if ":" in inside:
            parts = [p.strip() for p in inside.split(":")]
            if len(parts) > 3:
                raise ValueError(inside)
            numbers = tuple(int(p) if p else None for p in parts)
            return Step("slice", numbers=numbers)
        return Step("index", numbers=tuple(int(p) for p in inside.split(",")))
    except ValueError:
        raise JSONPathError(f"[{inside}] in {text!r} is not an index, slice or filter") from None


def _split_names(inside: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", inside)]


def _filter(expression: str) -> Filter:
    compared = _COMPARISON.match(expression)
    if not compared:
        if not expression.startswith("@"):
            raise JSONPathError(f"filter ?({expression}) must start with @")
        return Filter(parse_path(expression))
    path, operator, literal = compared.groups()
    literal = literal.strip()
    value: Any
    if literal[:1] in ("'", '"'):
        value = _string(literal)
    elif _NUMBER.match(literal):
        value = float(literal)
    elif literal in ("true", "false"):
        value = literal == "true"
    else:
        raise JSONPathError(f"filter ?({expression}): {literal} is not a literal")
    return Filter(parse_path(path), operator, value)


def find(path: Path, root: Any) -> list[Any]:
    """Every value `path` names in `root` (none where a key is missing)."""
    values = [root]
    for step in path.steps:
        values = [found for value in values for found in _apply(step, value)]
    return values


def _field(step: Step, value: Any) -> Iterator[Any]:
    if isinstance(value, dict) and step.names[0] in value:
        yield value[step.names[0]]


def _union(step: Step, value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        yield from (value[name] for name in step.names if name in value)


def _all(_step: Step, value: Any) -> Iterator[Any]:
    yield from _members(value)


def _recurse(step: Step, value: Any) -> Iterator[Any]:
    yield from _below(value, step.names[0])


def _index(step: Step, value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        for number in step.numbers:
            if number is not None and -len(value) <= number < len(value):
                yield value[number]


def _slice(step: Step, value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        yield from value[slice(*step.numbers)]


def _filtered(step: Step, value: Any) -> Iterator[Any]:
    rule = step.filter
    if rule is not None:
        yield from (member for member in _members(value) if _passes(rule, member))


_STEPS = {
    "field": _field,
    "union": _union,
    "all": _all,
    "recurse": _recurse,
    "index": _index,
    "slice": _slice,
    "filter": _filtered,
}


def _apply(step: Step, value: Any) -> Iterator[Any]:
    return _STEPS[step.kind](step, value)


def _members(value: Any) -> Sequence[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return value if isinstance(value, list) else []


def _below(value: Any, name: str) -> Iterator[Any]:
    if isinstance(value, dict):
        if name == "*":
            yield from value.values()
        elif name in value:
            yield value[name]
    for member in _members(value):
        yield from _below(member, name)


def _passes(rule: Filter, member: Any) -> bool:
    found = find(rule.path, member)
    if not rule.operator:
        return bool(found)
    for value in found:
        if isinstance(rule.value, float) and isinstance(value, bool):
            continue
        if isinstance(rule.value, float) and isinstance(value, int | float):
            left: Any = float(value)
        elif type(value) is type(rule.value):
            left = value
        else:
            continue
        if _compare(left, rule.operator, rule.value):
            return True
    return False


def _compare(left: Any, operator: str, right: Any) -> bool:
    if operator == "==":
        return bool(left == right)
    if operator == "!=":
        return bool(left != right)
    try:
        return bool(
            {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[
                operator
            ]
        )
    except TypeError:
        return False


def text_of(value: Any) -> str:
    """A value as kubectl prints it: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, separators=(",", ":"))


def render(nodes: Sequence[Node], root: Any) -> str:
    """The parsed template printed over `root`."""
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.text)
        elif isinstance(node, Path):
            out.append(" ".join(text_of(value) for value in find(node, root)))
        else:
            out.extend(render(node.body, item) for item in find(node.path, root))
    return "".join(out)
