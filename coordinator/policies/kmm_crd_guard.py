"""The KMM CRD delete guard: KMM's Module and NodeModulesConfig CRDs stay while gpuctl has a
Module.

Deleting a CustomResourceDefinition deletes its objects through storage, past every admission
policy on the objects themselves (the Module and NodeModulesConfig guards see nothing):

- `modules.kmm.sigs.x-k8s.io` gone: every Module is marked for deletion, and a running KMM
  unloads each of them on every node at once, busy or not (module_reconciler.go finalizeModule);
- `nodemodulesconfigs.kmm.sigs.x-k8s.io` gone: every node's record of what is loaded goes, and
  once the CRD is back (KMM reinstalled) KMM recreates each without status and its loaders
  remove the live `xe` everywhere at once.

Both happen on KMM's own uninstall (`kubectl delete -k`, an OLM uninstall that removes the
CRDs). So a ValidatingAdmissionPolicy refuses the DELETE of either CRD while a gpuctl Module (a
Module of the coordinator's namespace carrying `gpuctl.dev/gpudriver`) exists: the gpuctl
Modules are the policy's parameters (its binding's paramRef selects them), each one refuses,
and with none left (`parameterNotFoundAction: Allow`) the DELETE goes through. There is no
annotated way out on the CRD: the way is to remove the GPUDrivers first (docs/uninstall.md).

What cannot be guarded: etcd edited underneath, or the CRD deleted with the guard deleted first.
Pure data; hack/generate.py writes it into the chart (charts/gpuctl/templates/
kmm-crd-delete-guard.yaml) and the tests install the same objects.
"""

from __future__ import annotations

from typing import Any

from coordinator.policies.admission_policy import DOCS, policy_and_binding, templated_message
from gpuctl.common import names

GUARDED_CRDS = (names.KMM_MODULES, f"{names.KMM_NODE_CONFIG_PLURAL}.{names.KMM_GROUP}")


def refusal_message(crd: str, namespace: str, module: str) -> str:
    """What a refused DELETE says, once per gpuctl Module (also the CEL message's text)."""
    return (
        f"deleting CRD {crd} while gpuctl's Module {namespace}/{module} exists makes KMM "
        f"unload or reload the driver on every node at once, busy or not (the CRD's objects "
        f"are deleted past every admission check). Delete the GPUDrivers first: gpuctl unloads "
        f"their nodes one by one, each after its checks, and deletes its Modules (see {DOCS})"
    )


def guard_objects(
    name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, both called `name`, refusing the DELETE of
    KMM's Module and NodeModulesConfig CRDs while a gpuctl Module exists in `namespace`."""
    spec = {
        "failurePolicy": "Fail",
        "paramKind": {
            "apiVersion": f"{names.KMM_GROUP}/{names.KMM_VERSION}",
            "kind": "Module",
        },
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["apiextensions.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["DELETE"],
                    "resources": ["customresourcedefinitions"],
                    "resourceNames": list(GUARDED_CRDS),
                }
            ],
        },
        # Evaluated once per gpuctl Module (the binding's parameters): each one refuses.
        "validations": [
            {
                "expression": "params == null",
                "messageExpression": templated_message(
                    refusal_message("\0CRD\0", "\0NAMESPACE\0", "\0MODULE\0"),
                    {
                        "CRD": "oldObject.metadata.name",
                        "NAMESPACE": "params.metadata.namespace",
                        "MODULE": "params.metadata.name",
                    },
                ),
                "reason": "Forbidden",
            }
        ],
    }
    objects = policy_and_binding(name, spec, labels, annotations)
    objects[1]["spec"]["paramRef"] = {
        "namespace": namespace,
        "selector": {"matchExpressions": [{"key": names.DRIVER_LABEL, "operator": "Exists"}]},
        "parameterNotFoundAction": "Allow",
    }
    return objects
