"""The CustomResourceDefinition object around a resource's schema.

Our resources (GPUDriver in gpuctl/crds/gpudriver.py, GPUNode in
gpuctl/crds/gpunode.py) share one shape: cluster-scoped, one version that is served
and stored, a status subresource, printer columns for `kubectl get`. Each module writes only its
schema and columns; this one writes what goes around them, so the generated chart files (hack/) keep
one layout. Plain data that imports nothing, so the schema modules stay free of the API plumbing in
coordinator/kube.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def custom_resource_definition(
    *,
    group: str,
    version: str,
    kind: str,
    plural: str,
    singular: str,
    short_names: Sequence[str],
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    printer_columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """The whole CustomResourceDefinition of `plural`.`group` (keys in the chart's order)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }
