"""What a Kubernetes request is about, for the benches that count requests by kind.

`resource_kind` names the resource of a REST path ("nodes", "pods/eviction",
"gpudrivers/status"); a bench counts "<METHOD> <kind>" so a report says which requests a
rollout costs, not only how many (bench.fleet_scale through bench.fleet_coordinator,
bench.rollout_reaction in-process).
"""

from __future__ import annotations


def resource_kind(resource_path: str) -> str:
    """The resource a REST path names: the part after the version (or namespace), plus the
    subresource if any ("pods/eviction", "gpudrivers/status")."""
    parts = [p for p in resource_path.split("?", 1)[0].split("/") if p]
    start = 2 if parts[:1] == ["api"] else 3
    rest = parts[start:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return "other"
    kind = rest[0]
    return f"{kind}/{rest[2]}" if len(rest) > 2 else kind
