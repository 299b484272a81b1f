"""The Module delete guard: only the coordinator may delete (or unlabel) a gpuctl KMM Module.

KMM starts unloading a Module on every node as soon as the Module is marked for deletion
(module_reconciler.go: Reconcile → finalizeModule removes it from every NodeModulesConfig, and
nmc_reconciler.go then runs an unloader on each node), busy or not; a finalizer on the Module
cannot help, because the deletion timestamp is all KMM needs. So the DELETE itself is refused:
a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, built into the API server, no
webhook server) and its binding deny

- DELETE of a Module carrying `gpuctl.dev/gpudriver` (names.DRIVER_LABEL) in the coordinator's
  namespace, unless the caller is the coordinator's ServiceAccount or the Module carries
  `gpuctl.dev/allow-delete: <reason>` (names.ALLOW_DELETE_ANNOTATION, the deliberate way out
  when the coordinator is gone for good; the reason goes to the audit log);
- UPDATE that takes `gpuctl.dev/gpudriver` off such a Module (it would then escape the guard),
  unless the caller is the coordinator.

That covers `kubectl delete module`, a namespace deletion (the namespace controller deletes
its content), and the garbage collector after a GPUDriver's finalizer was removed by hand.

One home: hack/generate.py writes these objects into the chart
(charts/gpuctl/templates/module-delete-guard.yaml) with Helm expressions for the names, and the
integration tests install the same objects with the test's names. No I/O here.
"""

from __future__ import annotations

from typing import Any

from gpuctl.common import names

API_VERSION = "admissionregistration.k8s.io/v1"
# The chart keeps the guard on `helm uninstall`, so Modules left behind stay guarded.
HELM_KEEP = {"helm.sh/resource-policy": "keep"}
DOCS = "docs/uninstall.md"


def service_account_username(namespace: str, service_account: str) -> str:
    """The username the API server gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def _cel_string(text: str) -> str:
    """`text` as a CEL string literal, single-quoted (the chart's Helm expressions inside it
    use double quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _allowed(annotation_holder: str) -> str:
    """CEL: `<holder>` carries the allow-delete annotation with a non-empty reason."""
    key = _cel_string(names.ALLOW_DELETE_ANNOTATION)
    return (
        f"has({annotation_holder}.metadata.annotations) && "
        f"{key} in {annotation_holder}.metadata.annotations && "
        f"{annotation_holder}.metadata.annotations[{key}] != ''"
    )


def refusal_message(module: str, driver: str) -> str:
    """What a refused DELETE says (also the CEL message's text, for tests to compare)."""
    return (
        f"deleting Module {module} makes KMM unload its driver on every node at once, busy "
        f"or not. Delete GPUDriver {driver} instead: gpuctl unloads its nodes one by one, "
        f"each after its checks, then deletes this Module. If the gpuctl coordinator is gone "
        f"for good, annotate the Module {names.ALLOW_DELETE_ANNOTATION}=<reason> first "
        f"(see {DOCS})"
    )


def _refusal_expression() -> str:
    """CEL building refusal_message from the Module being deleted."""
    template = refusal_message("\0MODULE\0", "\0DRIVER\0")
    module = "oldObject.metadata.name"
    driver = f"oldObject.metadata.labels[{_cel_string(names.DRIVER_LABEL)}]"
    before, rest = template.split("\0MODULE\0")
    middle, after = rest.split("\0DRIVER\0")
    return " + ".join(
        [_cel_string(before), module, _cel_string(middle), driver, _cel_string(after)]
    )


UNLABEL_MESSAGE = (
    f"only the gpuctl coordinator may remove {names.DRIVER_LABEL} from a gpuctl Module "
    f"(the Module would escape the delete guard; see {DOCS})"
)


def guard_objects(
    name: str,
    namespace: str,
    coordinator_username: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, both called `name`, guarding the gpuctl
    Modules in `namespace`, with `coordinator_username` the one caller always allowed."""
    coordinator = _cel_string(coordinator_username)
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                # Matched against the old and the new object: a DELETE has only the old one.
                "objectSelector": {
                    "matchExpressions": [{"key": names.DRIVER_LABEL, "operator": "Exists"}]
                },
                "resourceRules": [
                    {
                        "apiGroups": [names.KMM_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["DELETE", "UPDATE"],
                        "resources": [names.KMM_MODULE_PLURAL],
                    }
                ],
            },
            "variables": [
                {
                    "name": "byCoordinator",
                    "expression": f"request.userInfo.username == {coordinator}",
                }
            ],
            "validations": [
                {
                    "expression": (
                        "request.operation != 'DELETE' || variables.byCoordinator || "
                        f"({_allowed('oldObject')})"
                    ),
                    "messageExpression": _refusal_expression(),
                    "reason": "Forbidden",
                },
                {
                    "expression": (
                        "request.operation != 'UPDATE' || variables.byCoordinator || "
                        f"(has(object.metadata.labels) && "
                        f"{_cel_string(names.DRIVER_LABEL)} in object.metadata.labels)"
                    ),
                    "message": UNLABEL_MESSAGE,
                    "reason": "Forbidden",
                },
            ],
            "auditAnnotations": [
                {
                    "key": names.ALLOW_DELETE_AUDIT_KEY,
                    "valueExpression": (
                        f"request.operation == 'DELETE' && !variables.byCoordinator && "
                        f"({_allowed('oldObject')}) ? string(oldObject.metadata.annotations"
                        f"[{_cel_string(names.ALLOW_DELETE_ANNOTATION)}]) : ''"
                    ),
                }
            ],
        },
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
