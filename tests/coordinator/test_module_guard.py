"""The Module delete guard's objects (coordinator/policies/module_guard.py) and their chart
template."""

from __future__ import annotations

from pathlib import Path

from coordinator.policies.admission_policy import KEEP_ON_UNINSTALL, service_account_username
from coordinator.policies.module_guard import SPEC_MESSAGE, guard_objects, refusal_message
from gpuctl.common import names
from hack.generators.admission_guards import MODULE_GUARD_PATH, module_guard_text

REPO = Path(__file__).resolve().parents[2]


def test_the_policy_guards_gpuctl_modules_in_one_namespace_and_lets_the_coordinator_through() -> (
    None
):
    policy, binding = guard_objects("g", "gpuctl-system", "system:serviceaccount:gpuctl-system:c")
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert binding["spec"] == {"policyName": "g", "validationActions": ["Deny"]}
    match = policy["spec"]["matchConstraints"]
    assert match["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "gpuctl-system"}
    }
    assert match["objectSelector"]["matchExpressions"] == [
        {"key": names.DRIVER_LABEL, "operator": "Exists"}
    ]
    rule = match["resourceRules"][0]
    assert rule["apiGroups"] == [names.KMM_GROUP]
    assert rule["resources"] == [names.KMM_MODULE_PLURAL]
    assert set(rule["operations"]) == {"DELETE", "UPDATE"}
    assert policy["spec"]["failurePolicy"] == "Fail"
    (variable,) = policy["spec"]["variables"]
    assert variable["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:gpuctl-system:c'"
    )
    delete_rule = policy["spec"]["validations"][0]["expression"]
    assert f"'{names.ALLOW_DELETE_ANNOTATION}' in oldObject.metadata.annotations" in delete_rule


def test_a_username_with_a_quote_stays_one_cel_string() -> None:
    policy, _ = guard_objects("g", "ns", "it's")
    (variable,) = policy["spec"]["variables"]
    assert variable["expression"] == "request.userInfo.username == 'it\\'s'"


def test_the_refusal_names_the_module_the_gpudriver_and_the_way_out() -> None:
    message = refusal_message("gpu-policy-gpu", "gpu-policy")
    assert "Module gpu-policy-gpu" in message
    assert "Delete GPUDriver gpu-policy instead" in message
    assert f"{names.ALLOW_DELETE_ANNOTATION}=<reason>" in message
    policy, _ = guard_objects("g", "ns", "u")
    expression = policy["spec"]["validations"][0]["messageExpression"]
    assert expression.count("oldObject.metadata.name") == 1
    assert f"oldObject.metadata.labels['{names.DRIVER_LABEL}']" in expression


def test_service_account_usernames() -> None:
    assert service_account_username("ns", "sa") == "system:serviceaccount:ns:sa"


def test_the_chart_template_lets_the_charts_coordinator_service_account_through() -> None:
    template = module_guard_text()
    assert (REPO / MODULE_GUARD_PATH).read_text() == template
    service_account = (REPO / "charts/gpuctl/templates/coordinator-serviceaccount.yaml").read_text()
    assert 'name: {{ include "gpuctl.fullname" . }}-coordinator' in service_account
    assert '$coordinator := printf "%s-coordinator" (include "gpuctl.fullname" .)' in template
    assert "system:serviceaccount:{{ .Release.Namespace }}:{{ $coordinator }}" in template
    assert "kubernetes.io/metadata.name: '{{ .Release.Namespace }}'" in template
    assert template.count(f"{next(iter(KEEP_ON_UNINSTALL))}: keep") == 2
    assert template.count('{{- include "gpuctl.labels" . | nindent 4 }}') == 2


def test_a_spec_change_is_the_coordinators_unless_the_module_allows_an_edit() -> None:
    policy, _ = guard_objects("g", "ns", "system:serviceaccount:ns:c")
    spec_rule = next(
        v
        for v in policy["spec"]["validations"]
        if "object.spec == oldObject.spec" in v["expression"]
    )
    assert spec_rule["expression"].startswith(
        "request.operation != 'UPDATE' || variables.byCoordinator || "
    )
    assert (
        f"'{names.ALLOW_EDIT_ANNOTATION}' in oldObject.metadata.annotations"
        in (spec_rule["expression"])
    )
    assert spec_rule["message"] == SPEC_MESSAGE
    assert f"{names.ALLOW_EDIT_ANNOTATION}=<reason>" in SPEC_MESSAGE
    keys = [audit["key"] for audit in policy["spec"]["auditAnnotations"]]
    assert keys == [names.ALLOW_DELETE_AUDIT_KEY, names.ALLOW_EDIT_AUDIT_KEY]
