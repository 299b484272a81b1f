"""The Module guard: only the coordinator may delete, unlabel or re-spec a gpuctl KMM Module.

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
  unless the caller is the coordinator;
- UPDATE that changes such a Module's spec (image, pull policy, parameters,
  `inTreeModulesToRemove`, selector, tolerations, ...: KMM reloads every node at that version
  on any of them, and the coordinator's revert would be a second fleet-wide reload), unless the
  caller is the coordinator or the Module already carries `gpuctl.dev/allow-edit: <reason>`
  (names.ALLOW_EDIT_ANNOTATION, audited like the delete's). Metadata-only updates (KMM's
  finalizer, an admin's annotation, the way-out annotations themselves) go through.

That covers `kubectl delete module`, a namespace deletion (the namespace controller deletes
its content), and the garbage collector after a GPUDriver's finalizer was removed by hand.

One home: hack/generate.py writes these objects into the chart
(charts/gpuctl/templates/module-delete-guard.yaml) with Helm expressions for the names, and the
integration tests install the same objects with the test's names. No I/O here.
"""

from __future__ import annotations

from typing import Any

from coordinator.policies.admission_policy import (
    DOCS,
    allow_reason_audit,
    allowed_by_annotation,
    cel_string,
    policy_and_binding,
    templated_message,
)
from gpuctl.common import names


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
    return templated_message(
        refusal_message("\0MODULE\0", "\0DRIVER\0"),
        {
            "MODULE": "oldObject.metadata.name",
            "DRIVER": f"oldObject.metadata.labels[{cel_string(names.DRIVER_LABEL)}]",
        },
    )


SPEC_MESSAGE = (
    "only the gpuctl coordinator may change a gpuctl Module's spec: on any change KMM reloads "
    "the driver on every node at that version, busy or not, and the coordinator would write "
    "its own spec back (a second reload). Change the GPUDriver instead: gpuctl rolls it node "
    "by node, each after its checks. If the gpuctl coordinator is gone for good, annotate the "
    f"Module {names.ALLOW_EDIT_ANNOTATION}=<reason> first (see {DOCS})"
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
    coordinator = cel_string(coordinator_username)
    spec = {
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
                    f"({allowed_by_annotation('oldObject')})"
                ),
                "messageExpression": _refusal_expression(),
                "reason": "Forbidden",
            },
            {
                "expression": (
                    "request.operation != 'UPDATE' || variables.byCoordinator || "
                    f"(has(object.metadata.labels) && "
                    f"{cel_string(names.DRIVER_LABEL)} in object.metadata.labels)"
                ),
                "message": UNLABEL_MESSAGE,
                "reason": "Forbidden",
            },
            {
                "expression": (
                    "request.operation != 'UPDATE' || variables.byCoordinator || "
                    "object.spec == oldObject.spec || "
                    f"({allowed_by_annotation('oldObject', names.ALLOW_EDIT_ANNOTATION)})"
                ),
                "message": SPEC_MESSAGE,
                "reason": "Forbidden",
            },
        ],
        "auditAnnotations": [
            allow_reason_audit(
                "request.operation == 'DELETE' && !variables.byCoordinator", "oldObject"
            ),
            allow_reason_audit(
                "request.operation == 'UPDATE' && !variables.byCoordinator && "
                "object.spec != oldObject.spec",
                "oldObject",
                names.ALLOW_EDIT_ANNOTATION,
                names.ALLOW_EDIT_AUDIT_KEY,
            ),
        ],
    }
    return policy_and_binding(name, spec, labels, annotations)
