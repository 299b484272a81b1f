"""Gather what `gpuctl rollout plan` decides from, through the Kubernetes API (read only).

The Module the GPUDriver owns (its selector says which nodes are targeted), those Nodes, their
GPUNode reports, the running pods that request `gpu.intel.com/*` resources on them, and the
allocated GPU ResourceClaims placed on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from gpuctl.cli.errors import CommandError
from gpuctl.cli.gpudriver_api import REQUEST_TIMEOUT
from gpuctl.cli.kube_errors import call_api, describe_api_error
from gpuctl.cli.node_view import from_gpunode
from gpuctl.cli.rollout_plan import NodeFacts, PlanSettings
from gpuctl.cli.source_flags import Clock
from gpuctl.common import names
from gpuctl.common.gpu_claims import claim_nodes, is_gpu_allocation
from gpuctl.common.unload_rule import modules_unloaded_with

GPU_RESOURCE_PREFIX = "gpu.intel.com/"
CLAIMS = "resourceclaims.resource.k8s.io"


def plan_settings(driver: Mapping[str, Any]) -> PlanSettings:
    spec = driver.get("spec") or {}
    rollout = spec.get("rollout") or {}
    kernel_module = spec.get("kernelModule") or {}
    return PlanSettings(
        evict_gpu_pods=bool(rollout.get("evictGPUPods", False)),
        disable_idle_vfs=bool(rollout.get("disableIdleVFs", False)),
        unloaded_with=tuple(modules_unloaded_with(kernel_module.get("modulesLoadingOrder"))),
        driver=str(kernel_module.get("moduleName") or ""),
    )


def module_selector(api_client: Any, driver: Mapping[str, Any]) -> dict[str, str]:
    """The `spec.selector` of the Module named in the GPUDriver's `status.module`."""
    ref = str((driver.get("status") or {}).get("module", ""))
    parts = ref.split("/")
    if len(parts) != 3:
        raise CommandError(
            f'GPUDriver "{driver["metadata"]["name"]}" has no KMM Module yet (status.module is '
            "empty): is gpuctl-coordinator running, and is KMM installed?"
        )
    _, namespace, name = parts
    custom: Any = client.CustomObjectsApi(api_client)
    server = str(api_client.configuration.host)
    module = call_api(
        "get",
        names.KMM_MODULES,
        server,
        lambda: custom.get_namespaced_custom_object(
            names.KMM_GROUP,
            names.KMM_VERSION,
            namespace,
            names.KMM_MODULE_PLURAL,
            name,
            _request_timeout=REQUEST_TIMEOUT,
        ),
    )
    return dict((module.get("spec") or {}).get("selector") or {})


def gather_facts(api_client: Any, selector: Mapping[str, str], clock: Clock) -> list[NodeFacts]:
    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    server = str(api_client.configuration.host)
    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    listed = call_api(
        "list",
        "nodes",
        server,
        lambda: core.list_node(label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT),
    )
    nodes: list[dict[str, Any]] = [api_client.sanitize_for_serialization(n) for n in listed.items]
    node_names = {n["metadata"]["name"] for n in nodes}
    gpunodes = call_api(
        "list",
        names.GPUNODES,
        server,
        lambda: custom.list_cluster_custom_object(
            names.GROUP, names.VERSION, names.GPUNODE_PLURAL, _request_timeout=REQUEST_TIMEOUT
        ),
    )
    now = clock()
    views = {v.name: v for v in (from_gpunode(o, now) for o in gpunodes.get("items", []))}
    pods = _gpu_pods_by_node(api_client, core, server, node_names)
    claims = _claims_by_node(custom, server, nodes)
    return [
        NodeFacts(
            name=node["metadata"]["name"],
            labels=node["metadata"].get("labels") or {},
            annotations=node["metadata"].get("annotations") or {},
            ready=_ready(node),
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            view=views.get(node["metadata"]["name"]),
            gpu_pods=sorted(pods.get(node["metadata"]["name"], [])),
            claims=sorted(claims.get(node["metadata"]["name"], [])),
        )
        for node in nodes
    ]


def _ready(node: Mapping[str, Any]) -> bool | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return {"True": True, "False": False}.get(condition.get("status"))
    return None


def _gpu_pods_by_node(
    api_client: Any, core: Any, server: str, node_names: set[str]
) -> dict[str, list[str]]:
    listed = call_api(
        "list",
        "pods",
        server,
        lambda: core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _request_timeout=REQUEST_TIMEOUT,
        ),
    )
    found: dict[str, list[str]] = {}
    for pod in listed.items:
        node = pod.spec.node_name
        if node in node_names and requests_gpu(api_client.sanitize_for_serialization(pod)):
            found.setdefault(node, []).append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return found


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """A pod whose containers request or limit a `gpu.intel.com/*` resource."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for amounts in (resources.get("requests") or {}, resources.get("limits") or {}):
            if any(key.startswith(GPU_RESOURCE_PREFIX) for key in amounts):
                return True
    return False


def _claims_by_node(
    custom: Any, server: str, nodes: Sequence[Mapping[str, Any]]
) -> dict[str, list[str]]:
    try:
        listed = custom.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceclaims", _request_timeout=REQUEST_TIMEOUT
        )
    except client.exceptions.ApiException as error:
        if error.status == 404:  # DRA is not served: there can be no claims
            return {}
        raise CommandError(describe_api_error(error, "list", CLAIMS, server)) from error
    found: dict[str, list[str]] = {}
    for claim in listed.get("items", []):
        if not is_gpu_allocation(claim):
            continue
        meta = claim.get("metadata") or {}
        label = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        placed = claim_nodes(claim, nodes)
        for node in placed if placed is not None else [n["metadata"]["name"] for n in nodes]:
            found.setdefault(node, []).append(label)
    return found
