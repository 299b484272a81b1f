"""Gather what `gpuctl rollout plan` decides from, through the Kubernetes API (read only).

The KMM Module the GPUDriver names in `status.module` (its version is the target; absent
before the first install), every Node (the plan keeps the wanted ones and those carrying
`gpuctl.dev/driver-target`), their GPUNode reports, the pods that request `gpu.intel.com/*`
resources on them, and the allocated GPU ResourceClaims placed on them. Claims are listed in
the version API discovery serves; when discovery serves none, no claim can exist, but when a
version is served and the list fails (or discovery itself fails), the claims are unknown and
the plan blocks every node: unknown is never safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.gpudriver_api import REQUEST_TIMEOUT
from gpuctl.cli.kmm_touch import module_ref
from gpuctl.cli.kube_errors import call_api, describe_api_error, status_body, unreachable
from gpuctl.cli.node_view import from_gpunode
from gpuctl.cli.rollout_plan import NodeFacts
from gpuctl.cli.source_flags import Clock
from gpuctl.common import names
from gpuctl.common.gpu_claims import DRA_GROUP, claims_on_nodes, served_dra_version
from gpuctl.common.gpu_pods import is_gpu_pod

CLAIMS = "resourceclaims.resource.k8s.io"


def get_module(api_client: Any, driver: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Module the GPUDriver's `status.module` names; None when it names none or the
    Module is not there (not created yet, or KMM not installed)."""
    ref = module_ref(driver)
    if ref is None:
        return None
    namespace, name = ref
    custom: Any = client.CustomObjectsApi(api_client)
    server = str(api_client.configuration.host)
    try:
        module: Mapping[str, Any] = custom.get_namespaced_custom_object(
            names.KMM_GROUP,
            names.KMM_VERSION,
            namespace,
            names.KMM_MODULE_PLURAL,
            name,
            _request_timeout=REQUEST_TIMEOUT,
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise CommandError(describe_api_error(error, "get", names.KMM_MODULES, server)) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise unreachable(server, error) from error
    return module


def gather_facts(api_client: Any, clock: Clock) -> tuple[list[NodeFacts], str]:
    """Every Node with its report, GPU pods and claims; and why the claims are unknown ("" when
    they are known)."""
    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    server = str(api_client.configuration.host)
    listed = call_api(
        "list", "nodes", server, lambda: core.list_node(_request_timeout=REQUEST_TIMEOUT)
    )
    nodes: list[dict[str, Any]] = [api_client.sanitize_for_serialization(n) for n in listed.items]
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
    claims, claims_unknown, dra_served = _claims_by_node(api_client, custom, server, nodes)
    pods = _gpu_pods_by_node(api_client, core, server, dra_served=dra_served)
    return [
        NodeFacts(
            node=node,
            view=views.get(node["metadata"]["name"]),
            gpu_pods=sorted(pods.get(node["metadata"]["name"], [])),
            claims=claims.get(node["metadata"]["name"], ()),
        )
        for node in nodes
    ], claims_unknown


def _gpu_pods_by_node(
    api_client: Any, core: Any, server: str, *, dra_served: bool
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
        if node and is_gpu_pod(api_client.sanitize_for_serialization(pod), dra_served=dra_served):
            found.setdefault(node, []).append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return found


def _claims_by_node(
    api_client: Any, custom: Any, server: str, nodes: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, tuple[str, ...]], str, bool]:
    """Allocated GPU claims by node, why they are unknown ("" when known), and whether DRA
    is served (where it is not, pods referencing claims count as GPU pods: gpu_pods.py)."""
    try:
        version = served_dra_version(_served_groups(api_client))
        if version is None:
            return {}, "", False
        claims = _list_claims(custom, server, version)
    except ClaimsUnknownError as unknown:
        return {}, str(unknown), True
    return claims_on_nodes(claims, nodes), "", True


class ClaimsUnknownError(Exception):
    """Why the allocated claims could not be read, in words."""


def _served_groups(api_client: Any) -> dict[str, list[str]]:
    """API discovery: group -> served versions."""
    try:
        groups = client.ApisApi(api_client).get_api_versions(_request_timeout=REQUEST_TIMEOUT)
    except ApiException as error:
        raise ClaimsUnknownError(f"API discovery failed: {_words(error)}") from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ClaimsUnknownError(f"API discovery failed: {error}") from error
    return {g.name: [v.version for v in g.versions or []] for g in groups.groups or []}


def _list_claims(custom: Any, server: str, version: str) -> list[Mapping[str, Any]]:
    try:
        listed = custom.list_cluster_custom_object(
            DRA_GROUP, version, "resourceclaims", _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as error:
        if error.status == 404:
            words = f"discovery serves {DRA_GROUP}/{version}, but listing {CLAIMS} gave 404"
        else:
            words = describe_api_error(error, "list", CLAIMS, server)
        raise ClaimsUnknownError(words) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ClaimsUnknownError(f"listing {CLAIMS} failed: {error}") from error
    return list(listed.get("items") or [])


def _words(error: ApiException) -> str:
    return str(status_body(error).get("message") or error.reason or error.status)
