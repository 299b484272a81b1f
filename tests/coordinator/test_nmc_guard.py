"""The NodeModulesConfig delete guard's objects (coordinator/policies/nmc_guard.py), their chart
template, and the CEL message helper both guards share (coordinator/policies/admission_policy.py).

What the API server makes of the CEL is proven on a real one with real KMM in
tests/integration/rollout/test_nmc_delete_guard.py; here, the shape each part relies on."""

from __future__ import annotations

from pathlib import Path

from coordinator.policies.admission_policy import KEEP_ON_UNINSTALL, templated_message
from coordinator.policies.nmc_guard import (
    GARBAGE_COLLECTOR_USERNAMES,
    guard_objects,
    refusal_message,
)
from gpuctl.common import names
from hack.generators.admission_guards import NMC_GUARD_PATH, nmc_guard_text

REPO = Path(__file__).resolve().parents[2]


def test_the_policy_guards_only_the_delete_of_node_modules_configs() -> None:
    policy, binding = guard_objects("g", "gpuctl-system")
    assert binding["spec"] == {"policyName": "g", "validationActions": ["Deny"]}
    match = policy["spec"]["matchConstraints"]
    assert "namespaceSelector" not in match  # NodeModulesConfigs are cluster-scoped
    (rule,) = match["resourceRules"]
    assert rule["apiGroups"] == [names.KMM_GROUP]
    assert rule["resources"] == [names.KMM_NODE_CONFIG_PLURAL]
    assert rule["operations"] == ["DELETE"]
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_only_a_node_config_with_a_module_of_the_namespace_loaded_is_guarded() -> None:
    policy, _ = guard_objects("g", "gpuctl-system")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert (
        "oldObject.status.modules.exists(m, m.namespace == 'gpuctl-system')"
        in (variables["loadedHere"])
    )
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"].startswith("!variables.loadedHere || ")


def test_the_garbage_collector_passes_under_either_of_its_usernames() -> None:
    policy, _ = guard_objects("g", "ns")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    for username in GARBAGE_COLLECTOR_USERNAMES:
        assert f"'{username}'" in variables["byGarbageCollector"]
    assert "system:serviceaccount:kube-system:generic-garbage-collector" in (
        GARBAGE_COLLECTOR_USERNAMES
    )


def test_the_refusal_names_the_node_the_namespace_and_the_way_out() -> None:
    message = refusal_message("gpu-3", "gpuctl-system")
    assert "NodeModulesConfig gpu-3" in message
    assert "on node gpu-3" in message
    assert "namespace gpuctl-system" in message
    assert f"{names.ALLOW_DELETE_ANNOTATION}=<reason>" in message
    policy, _ = guard_objects("g", "gpuctl-system")
    expression = policy["spec"]["validations"][0]["messageExpression"]
    assert expression.count("oldObject.metadata.name") == 2


def test_a_templated_message_alternates_literals_and_expressions() -> None:
    assert templated_message("a \0X\0 b", {"X": "name"}) == "'a ' + name + ' b'"
    assert templated_message("\0X\0 it's", {"X": "name"}) == "name + ' it\\'s'"
    assert templated_message("plain", {}) == "'plain'"


def test_the_chart_template_is_the_guard_with_helm_names_and_is_kept_on_uninstall() -> None:
    template = nmc_guard_text()
    assert (REPO / NMC_GUARD_PATH).read_text() == template
    assert '$name := printf "%s-nmc-delete-guard" (include "gpuctl.fullname" .)' in template
    assert "m.namespace == '{{ .Release.Namespace }}'" in template
    assert template.count(f"{next(iter(KEEP_ON_UNINSTALL))}: keep") == 2
    assert template.count('{{- include "gpuctl.labels" . | nindent 4 }}') == 2
