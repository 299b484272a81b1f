"""The KMM CRD delete guard's objects (coordinator/policies/kmm_crd_guard.py) and their chart
template.

What the API server makes of them is proven on a real one with real KMM in
tests/integration/drivers/test_module_delete_guard.py; here, the shape each part relies on."""

from __future__ import annotations

from pathlib import Path

from coordinator.policies.admission_policy import KEEP_ON_UNINSTALL
from coordinator.policies.kmm_crd_guard import GUARDED_CRDS, guard_objects, refusal_message
from gpuctl.common import names
from hack.generators.admission_guards import CRD_GUARD_PATH, crd_guard_text

REPO = Path(__file__).resolve().parents[2]


def test_only_the_delete_of_kmms_module_and_node_config_crds_is_matched() -> None:
    policy, _ = guard_objects("g", "gpuctl-system")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["apiextensions.k8s.io"]
    assert rule["resources"] == ["customresourcedefinitions"]
    assert rule["operations"] == ["DELETE"]
    assert rule["resourceNames"] == [
        "modules.kmm.sigs.x-k8s.io",
        "nodemodulesconfigs.kmm.sigs.x-k8s.io",
    ]
    assert list(GUARDED_CRDS) == rule["resourceNames"]
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_each_gpuctl_module_of_the_namespace_is_a_parameter_and_none_allows() -> None:
    policy, binding = guard_objects("g", "gpuctl-system")
    assert policy["spec"]["paramKind"] == {
        "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
        "kind": "Module",
    }
    assert binding["spec"]["paramRef"] == {
        "namespace": "gpuctl-system",
        "selector": {"matchExpressions": [{"key": names.DRIVER_LABEL, "operator": "Exists"}]},
        "parameterNotFoundAction": "Allow",
    }
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_refusal_names_the_crd_the_module_and_the_order() -> None:
    message = refusal_message("modules.kmm.sigs.x-k8s.io", "gpuctl-system", "xe-driver-gpu")
    assert "deleting CRD modules.kmm.sigs.x-k8s.io" in message
    assert "Module gpuctl-system/xe-driver-gpu" in message
    assert "Delete the GPUDrivers first" in message
    policy, _ = guard_objects("g", "gpuctl-system")
    expression = policy["spec"]["validations"][0]["messageExpression"]
    assert "params.metadata.name" in expression
    assert "params.metadata.namespace" in expression


def test_the_chart_template_is_the_guard_with_helm_names_and_is_kept_on_uninstall() -> None:
    template = crd_guard_text()
    assert (REPO / CRD_GUARD_PATH).read_text() == template
    assert '$name := printf "%s-kmm-crd-delete-guard" (include "gpuctl.fullname" .)' in template
    assert "namespace: '{{ .Release.Namespace }}'" in template
    assert template.count(f"{next(iter(KEEP_ON_UNINSTALL))}: keep") == 2
