"""What gpuctl's admission guards share: CEL literals, the annotated way out, the object pair.

Each guard (coordinator/policies/module_guard.py, coordinator/policies/nmc_guard.py) is a
ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1): built into the API
server, no webhook server to keep up, and enforced even when the coordinator is down. They share how
a CEL string is quoted, how the deliberate way out (`gpuctl.dev/allow-delete: <reason>`, or
`allow-edit`, on the object) reads, and the pair's shape. Pure data; no I/O.
"""

from __future__ import annotations

from typing import Any

from gpuctl.common import names

API_VERSION = "admissionregistration.k8s.io/v1"
# The chart's guards stay when the chart goes, so what is left behind stays guarded: on `helm
# uninstall` (and Flux's helm-controller, which is helm), and when Argo CD or Flux's
# kustomize-controller prune what left Git, each by its own annotation (docs/gitops.md).
KEEP_ON_UNINSTALL = {
    "helm.sh/resource-policy": "keep",
    "argocd.argoproj.io/sync-options": "Prune=false",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}
DOCS = "docs/uninstall.md"


def service_account_username(namespace: str, service_account: str) -> str:
    """The username the API server gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def cel_string(text: str) -> str:
    """`text` as a CEL string literal, single-quoted (the chart's Helm expressions inside it
    use double quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def allowed_by_annotation(holder: str, annotation: str = names.ALLOW_DELETE_ANNOTATION) -> str:
    """CEL: `<holder>` carries `annotation` (the way out) with a non-empty reason."""
    key = cel_string(annotation)
    return (
        f"has({holder}.metadata.annotations) && "
        f"{key} in {holder}.metadata.annotations && "
        f"{holder}.metadata.annotations[{key}] != ''"
    )


def allow_reason_audit(
    condition: str,
    holder: str,
    annotation: str = names.ALLOW_DELETE_ANNOTATION,
    audit_key: str = names.ALLOW_DELETE_AUDIT_KEY,
) -> dict[str, str]:
    """An audit annotation `audit_key` recording the reason in `annotation` when `condition`
    (CEL) holds and the way out was taken."""
    return {
        "key": audit_key,
        "valueExpression": (
            f"{condition} && ({allowed_by_annotation(holder, annotation)}) ? "
            f"string({holder}.metadata.annotations[{cel_string(annotation)}]) : ''"
        ),
    }


def templated_message(template: str, fields: dict[str, str]) -> str:
    """CEL concatenating `template` with each `\\0KEY\\0` marker replaced by the CEL expression
    `fields[KEY]`, so one Python function writes both a message and its CEL form."""
    parts: list[str] = []
    rest = template
    while "\0" in rest:
        before, key, rest = rest.split("\0", 2)
        parts += [cel_string(before), fields[key]]
    parts.append(cel_string(rest))
    return " + ".join(part for part in parts if part != "''")


def policy_and_binding(
    name: str,
    spec: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy `name` with `spec`, and its Deny binding of the same name."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata,
        "spec": spec,
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
