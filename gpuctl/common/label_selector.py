"""Checks a label selector string (`team=a,tier in (gold,silver),!canary`) before it is used.

The API server refuses a malformed selector with a 400 on every list; a flag carrying one
would leave a cache that never fills and a coordinator that waits without saying why. So the
flags that take a selector check it at start and exit with what is wrong, using the grammar
of Kubernetes' `labels.Parse` (apimachinery pkg/labels/selector.go): comma-separated
requirements, each `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v,...)`
or `key notin (v,...)`; keys are qualified names (an optional DNS-subdomain prefix and `/`,
then a name of at most 63 characters), values label values (empty, or at most 63).
"""

from __future__ import annotations

import re

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")
_SET = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")
_COMPARE = re.compile(r"^([^=!\s]+)\s*(==|=|!=)\s*(.*)$")
PREFIX_MAX = 253


class SelectorError(ValueError):
    """What is wrong with a selector, in words."""


def _key(key: str, requirement: str) -> None:
    if not _KEY.fullmatch(key):
        raise SelectorError(f"{requirement!r}: {key!r} is not a label key")
    prefix, _, _ = key.rpartition("/")
    if len(prefix) > PREFIX_MAX:
        raise SelectorError(f"{requirement!r}: the key's prefix is over {PREFIX_MAX} characters")


def _value(value: str, requirement: str) -> None:
    if not _VALUE.fullmatch(value):
        raise SelectorError(f"{requirement!r}: {value!r} is not a label value")


def _requirements(selector: str) -> list[str]:
    """Split on the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(selector):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {selector!r}")
        elif char == "," and depth == 0:
            parts.append(selector[start:index].strip())
            start = index + 1
    if depth:
        raise SelectorError(f"unbalanced '(' in {selector!r}")
    parts.append(selector[start:].strip())
    return parts


def _requirement(text: str) -> None:
    if not text:
        raise SelectorError("an empty requirement (two commas, or one at an end)")
    if set_match := _SET.match(text):
        key, _, values = set_match.groups()
        _key(key, text)
        listed = [v.strip() for v in values.split(",")]
        if listed == [""]:
            raise SelectorError(f"{text!r}: the set of values is empty")
        for value in listed:
            _value(value, text)
        return
    if compare := _COMPARE.match(text):
        key, _, value = compare.groups()
        _key(key, text)
        _value(value.strip(), text)
        return
    _key(text[1:].strip() if text.startswith("!") else text, text)


def check_selector(selector: str) -> str:
    """`selector` unchanged when it parses, else a SelectorError saying which part does not."""
    if not selector.strip():
        raise SelectorError("the selector is empty (leave the flag out to select everything)")
    for requirement in _requirements(selector):
        _requirement(requirement)
    return selector
