"""YAML as the generated chart files write it: in field order, without anchors or aliases."""

from __future__ import annotations

from typing import Any

import yaml


class _NoAliasDumper(yaml.SafeDumper):
    """Writes repeated sub-schemas in full instead of as YAML anchors and aliases."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def dump(data: Any, width: int = 100) -> str:
    """`width`: where long values fold (a Helm expression must not be folded mid-way)."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, width=width)
