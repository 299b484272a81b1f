"""A Node's name and labels, and core/v1 NodeSelector matching, over plain Node dicts (no I/O).

Read by every part that looks at Nodes: the GPUDriver's rules (gpuctl/gpudriver/node_selectors.py,
targeting.py), the node a ResourceClaim's devices were allocated on (gpu_claims.py), the
rollout and the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def node_name(node: Mapping[str, Any]) -> str:
    return str(node["metadata"]["name"])


def node_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    """The node's labels, as the node holds them (not a copy: a pass reads every node's
    labels several times; a caller that changes labels builds its own dict)."""
    labels: Mapping[str, str] | None = (node.get("metadata") or {}).get("labels")
    return labels or _NO_LABELS


def _compare(value: str | None, values: list[str], greater: bool) -> bool:
    if value is None or not values:
        return False
    try:
        number, bound = int(value), int(values[0])
    except ValueError:
        return False
    return number > bound if greater else number < bound


_OPERATORS: dict[str, Callable[[str | None, list[str]], bool]] = {
    "In": lambda value, values: value is not None and value in values,
    "NotIn": lambda value, values: value is None or value not in values,
    "Exists": lambda value, _values: value is not None,
    "DoesNotExist": lambda value, _values: value is None,
    "Gt": lambda value, values: _compare(value, values, greater=True),
    "Lt": lambda value, values: _compare(value, values, greater=False),
}


def _requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    operator = _OPERATORS.get(str(req.get("operator")))
    return operator is not None and operator(value, [str(v) for v in req.get("values") or []])


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = node_labels(node)
    fields = {"metadata.name": node_name(node)}
    expressions = term.get("matchExpressions") or []
    field_reqs = term.get("matchFields") or []
    if not expressions and not field_reqs:
        return False  # an empty term matches nothing (core/v1 NodeSelectorTerm)
    return all(_requirement_matches(r, labels.get(r["key"])) for r in expressions) and all(
        _requirement_matches(r, fields.get(r["key"])) for r in field_reqs
    )


def node_selector_matches(selector: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A core/v1 NodeSelector (terms ORed, requirements ANDed) against one node."""
    return any(_term_matches(t, node) for t in selector.get("nodeSelectorTerms") or [])
