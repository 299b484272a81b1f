"""Whether a GitOps tool owns a GPUDriver's spec.kernelModule (pure).

A rollback writes spec.kernelModule. Where Argo CD, Flux or Fleet applies the GPUDriver from
Git, that write is undone by the next sync (a tug of war over which driver nodes load), so the
coordinator and `gpuctl rollout undo` leave the spec alone there and say which revision to put
back in Git instead (docs/gitops.md#rollback-and-undo).

Owned means: a GitOps controller's field manager owns a field under spec.kernelModule in
`metadata.managedFields` (server-side apply and most updates record one), or the object carries
the tool's tracking mark (Argo CD's client-side apply records no field manager of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Field managers of GitOps controllers, by the tool they belong to.
GITOPS_MANAGERS = {
    "argocd-controller": "Argo CD",
    "argocd-application-controller": "Argo CD",
    "kustomize-controller": "Flux",
    "helm-controller": "Flux",
    "fleet-agent": "Rancher Fleet",
}
# The marks the tools put on what they apply: (metadata field, key, tool).
TRACKING_MARKS = (
    ("annotations", "argocd.argoproj.io/tracking-id", "Argo CD"),
    ("labels", "kustomize.toolkit.fluxcd.io/name", "Flux"),
    ("labels", "helm.toolkit.fluxcd.io/name", "Flux"),
)


def _owns_kernel_module(entry: Mapping[str, Any]) -> bool:
    fields = entry.get("fieldsV1")
    spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
    return isinstance(spec, Mapping) and "f:kernelModule" in spec


def gitops_owner(driver: Mapping[str, Any]) -> str:
    """Who applies the GPUDriver's spec.kernelModule from Git, in words ("" when nobody)."""
    metadata = driver.get("metadata") or {}
    for entry in metadata.get("managedFields") or []:
        if not isinstance(entry, Mapping):
            continue
        manager = str(entry.get("manager") or "")
        if manager in GITOPS_MANAGERS and _owns_kernel_module(entry):
            return f"{GITOPS_MANAGERS[manager]} (field manager {manager})"
    for field, key, tool in TRACKING_MARKS:
        marks = metadata.get(field) or {}
        if isinstance(marks, Mapping) and marks.get(key):
            return f"{tool} ({key}={marks[key]})"
    return ""
