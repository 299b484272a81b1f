"""The local control plane is a real one: schema validation, tokens, GC, RBAC, versions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from testbed.fixture_types import MakeNode
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration

HTTP_UNPROCESSABLE = 422
HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403
HTTP_NOT_FOUND = 404
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def module_body(name: str, kernel_mappings: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
        "kind": "Module",
        "metadata": {"name": name},
        "spec": {
            "selector": {"gpu": "true"},
            "moduleLoader": {
                "container": {
                    "modprobe": {"moduleName": "xe"},
                    "kernelMappings": kernel_mappings,
                }
            },
        },
    }


def test_server_reports_the_pinned_release(kube_admin: Any) -> None:
    info = k8s.VersionApi(kube_admin).get_code()
    assert (info.major, info.minor, info.git_version) == ("1", "36", "v1.36.3")


def test_module_without_kernel_mappings_is_rejected_by_kmm_schema(
    kube_admin: Any, namespace: str
) -> None:
    custom: Any = k8s.CustomObjectsApi(kube_admin)
    with pytest.raises(k8s.ApiException) as rejected:
        custom.create_namespaced_custom_object(
            "kmm.sigs.x-k8s.io", "v1beta1", namespace, "modules", module_body("xe", [])
        )
    assert rejected.value.status == HTTP_UNPROCESSABLE
    message = json.loads(rejected.value.body or "{}")["message"]
    assert "spec.moduleLoader.container.kernelMappings" in message
    assert "should have at least 1 items" in message

    accepted = custom.create_namespaced_custom_object(
        "kmm.sigs.x-k8s.io",
        "v1beta1",
        namespace,
        "modules",
        module_body("xe", [{"regexp": "^.+$", "containerImage": "registry.invalid/xe:1"}]),
    )
    assert accepted["metadata"]["name"] == "xe"


def _pod_on_node(name: str, node: str, service_account: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": service_account,
            "containers": [{"name": "agent", "image": "registry.invalid/gpuctl-agent:test"}],
        },
    }


def _review(api_client: Any, token: str, audiences: list[str]) -> Any:
    api: Any = k8s.AuthenticationV1Api(api_client)
    return api.create_token_review({"spec": {"token": token, "audiences": audiences}}).status


def test_pod_bound_token_reviews_with_its_node(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, make_node: MakeNode
) -> None:
    core: Any = k8s.CoreV1Api(kube_admin)
    node = make_node("gpu-1").metadata.name
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "agent"}})
    core.create_namespaced_pod(namespace, _pod_on_node("agent-x", node, "agent"))

    token = kube_cluster.service_account_token(
        namespace, "agent", audiences=["gpuctl"], bound_pod="agent-x"
    )
    review = _review(kube_admin, token, ["gpuctl"])
    assert review.authenticated is True
    assert review.user.username == f"system:serviceaccount:{namespace}:agent"
    assert review.user.extra[NODE_NAME_EXTRA] == [node]
    assert review.user.extra["authentication.kubernetes.io/pod-name"] == ["agent-x"]
    assert _review(kube_admin, token, ["someone-else"]).authenticated is not True

    core.delete_namespaced_pod("agent-x", namespace, grace_period_seconds=0)
    wait_until(
        "a token bound to a deleted Pod no longer authenticates",
        lambda: _review(kube_admin, token, ["gpuctl"]).authenticated is not True,
    )


def test_deleting_an_owner_garbage_collects_its_dependent(kube_admin: Any, namespace: str) -> None:
    core: Any = k8s.CoreV1Api(kube_admin)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [reference]}}
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "bystander"}})

    core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone() -> bool:
        try:
            core.read_namespaced_config_map("dependent", namespace)
        except k8s.ApiException as error:
            return bool(error.status == HTTP_NOT_FOUND)
        return False

    wait_until("the garbage collector deletes the dependent ConfigMap", dependent_gone)
    assert core.read_namespaced_config_map("bystander", namespace).metadata.name == "bystander"


def test_rbac_refuses_a_user_until_a_role_allows_it(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str
) -> None:
    alice: Any = k8s.CoreV1Api(kube_cluster.user_client("alice", ("gpuctl-viewers",)))
    with pytest.raises(k8s.ApiException) as refused:
        alice.list_namespaced_config_map(namespace)
    assert refused.value.status == HTTP_FORBIDDEN
    assert (
        'User "alice" cannot list resource "configmaps"'
        in json.loads(refused.value.body or "{}")["message"]
    )

    rbac: Any = k8s.RbacAuthorizationV1Api(kube_admin)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "viewers-read-configmaps"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-configmaps",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpuctl-viewers"}
            ],
        },
    )

    def alice_can_list() -> bool:
        try:
            alice.list_namespaced_config_map(namespace)
        except k8s.ApiException as error:
            if error.status != HTTP_FORBIDDEN:
                raise
            return False
        return True

    wait_until("the RoleBinding lets alice list ConfigMaps", alice_can_list)
    with pytest.raises(k8s.ApiException) as still_refused:
        alice.create_namespaced_config_map(namespace, {"metadata": {"name": "nope"}})
    assert still_refused.value.status == HTTP_FORBIDDEN


def test_service_account_client_acts_under_its_own_rbac(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str
) -> None:
    admin: Any = k8s.CoreV1Api(kube_admin)
    admin.create_namespaced_service_account(namespace, {"metadata": {"name": "coordinator"}})
    coordinator: Any = k8s.CoreV1Api(kube_cluster.service_account_client(namespace, "coordinator"))
    with pytest.raises(k8s.ApiException) as refused:
        coordinator.list_node()
    assert refused.value.status == HTTP_FORBIDDEN
    assert f"system:serviceaccount:{namespace}:coordinator" in (refused.value.body or "")


def test_unknown_token_is_unauthorized(kube_cluster: KubeCluster) -> None:
    stranger: Any = k8s.CoreV1Api(kube_cluster.token_client("not-a-token"))
    with pytest.raises(k8s.ApiException) as refused:
        stranger.list_namespace()
    assert refused.value.status == HTTP_UNAUTHORIZED
