"""Gather what `gpuctl rollout plan` decides from, through the Kubernetes API (read only).

The KMM Module the GPUDriver names in `status.module` (absent before the first install), every
Node, their GPUNode reports, the pods on them (the decision keeps the GPU ones, as the
coordinator does: gpuctl.rollout.input.gpu_pod_watch) and the ResourceClaims. Claims are listed in
the version API discovery serves; when discovery serves none, no claim can exist, but when a
version is served and the list fails (or discovery itself fails), the claims are unknown and
the decision blocks every node: unknown is never safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.kmm_touch import module_ref
from gpuctl.cli.kube_client import request_timeout
from gpuctl.cli.kube_errors import call_api, describe_api_error, status_body, unreachable
from gpuctl.cli.node_view import from_gpunode
from gpuctl.cli.rollout_plan import ClusterNode
from gpuctl.cli.source_flags import Clock
from gpuctl.common import names
from gpuctl.common.gpu_claims import DRA_GROUP, served_dra_version
from gpuctl.common.nodes import node_name
from gpuctl.rollout.input.gpu_pod_watch import gpu_pods
from gpuctl.rollout.input.pod_facts import node_pod_facts
from gpuctl.rollout.input.signing_key import SigningCertificate, cert_secrets, certificate_of

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
            _request_timeout=request_timeout(api_client),
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise CommandError(describe_api_error(error, "get", names.KMM_MODULES, server)) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise unreachable(server, error) from error
    return module


@dataclass(frozen=True)
class PlanFacts:
    """What the plan reads besides the GPUDriver and its Module."""

    nodes: list[ClusterNode]
    # The ResourceClaims as listed, and why they are unknown ("" when they are known).
    claims: list[Mapping[str, Any]]
    claims_unknown: str


def get_images_config(
    api_client: Any, module: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, str]:
    """KMM's ModuleImagesConfig of the Module (KMM names it after the Module): which images KMM
    has found (None without a Module, or where KMM keeps none yet); and why it could not be
    read ("" when it could). Unread, no image counts as found: reloads wait for theirs."""
    if module is None:
        return None, ""
    meta = module.get("metadata") or {}
    custom: Any = client.CustomObjectsApi(api_client)
    server = str(api_client.configuration.host)
    try:
        found: Mapping[str, Any] = custom.get_namespaced_custom_object(
            names.KMM_GROUP,
            names.KMM_VERSION,
            str(meta.get("namespace", "")),
            names.KMM_IMAGES_CONFIG_PLURAL,
            str(meta.get("name", "")),
            _request_timeout=request_timeout(api_client),
        )
    except ApiException as error:
        if error.status == 404:
            return None, ""
        return None, describe_api_error(error, "get", names.KMM_IMAGES_CONFIG_PLURAL, server)
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise unreachable(server, error) from error
    return found, ""


def get_signing_certificates(
    api_client: Any, driver: Mapping[str, Any]
) -> dict[str, SigningCertificate]:
    """The certSecrets the GPUDriver names, as read with the user's own credentials: the
    key KMM signs the target with (gpuctl/rollout/input/signing_key.py). One that cannot be read
    says why."""
    kernel_module = (driver.get("spec") or {}).get("kernelModule") or {}
    ref = module_ref(driver)
    if ref is None:
        return {}
    core: Any = client.CoreV1Api(api_client)
    server = str(api_client.configuration.host)
    found = {}
    for name in cert_secrets(kernel_module):
        secret_ref = f"{ref[0]}/{name}"
        try:
            secret = core.read_namespaced_secret(
                name, ref[0], _request_timeout=request_timeout(api_client)
            )
            found[name] = certificate_of(secret_ref, api_client.sanitize_for_serialization(secret))
        except ApiException as error:
            problem = (
                "" if error.status == 404 else describe_api_error(error, "get", "secrets", server)
            )
            found[name] = certificate_of(secret_ref, None, "" if error.status == 404 else problem)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise unreachable(server, error) from error
    return found


def gather_facts(api_client: Any, clock: Clock) -> PlanFacts:
    """Every Node with its report and GPU pods; the ResourceClaims, or why they are unknown."""
    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    server = str(api_client.configuration.host)
    listed = call_api(
        "list",
        "nodes",
        server,
        lambda: core.list_node(_request_timeout=request_timeout(api_client)),
    )
    nodes: list[dict[str, Any]] = [api_client.sanitize_for_serialization(n) for n in listed.items]
    gpunodes = call_api(
        "list",
        names.GPUNODES,
        server,
        lambda: custom.list_cluster_custom_object(
            names.GROUP,
            names.VERSION,
            names.GPUNODE_PLURAL,
            _request_timeout=request_timeout(api_client),
        ),
    )
    now = clock()
    views = {v.name: v for v in (from_gpunode(o, now) for o in gpunodes.get("items", []))}
    claims, claims_unknown, dra_served = _claims(api_client, custom, server)
    pods = _pods_by_node(api_client, core, server)
    return PlanFacts(
        [
            ClusterNode(
                node=node,
                view=views.get(node_name(node)),
                gpu_pods=gpu_pods(pods.get(node_name(node), []), dra_served=dra_served),
                pods=node_pod_facts(pods.get(node_name(node), []), dra_served=dra_served),
            )
            for node in nodes
        ],
        claims,
        claims_unknown,
    )


def _pods_by_node(api_client: Any, core: Any, server: str) -> dict[str, list[dict[str, Any]]]:
    """The pods that have not finished, by node (the decision keeps the GPU ones)."""
    listed = call_api(
        "list",
        "pods",
        server,
        lambda: core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _request_timeout=request_timeout(api_client),
        ),
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in listed.items:
        node = pod.spec.node_name
        if node:
            found.setdefault(node, []).append(api_client.sanitize_for_serialization(pod))
    return found


def _claims(api_client: Any, custom: Any, server: str) -> tuple[list[Mapping[str, Any]], str, bool]:
    """The ResourceClaims, why they are unknown ("" when known), and whether DRA is served
    (where it is not, pods referencing claims count as GPU pods: gpu_pods.py)."""
    try:
        version = served_dra_version(_served_groups(api_client))
        if version is None:
            return [], "", False
        return _list_claims(custom, server, version, request_timeout(api_client)), "", True
    except ClaimsUnknownError as unknown:
        return [], str(unknown), True


class ClaimsUnknownError(Exception):
    """Why the allocated claims could not be read, in words."""


def _served_groups(api_client: Any) -> dict[str, list[str]]:
    """API discovery: group -> served versions."""
    try:
        groups = client.ApisApi(api_client).get_api_versions(
            _request_timeout=request_timeout(api_client)
        )
    except ApiException as error:
        raise ClaimsUnknownError(f"API discovery failed: {_words(error)}") from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ClaimsUnknownError(f"API discovery failed: {error}") from error
    return {g.name: [v.version for v in g.versions or []] for g in groups.groups or []}


def _list_claims(custom: Any, server: str, version: str, timeout: float) -> list[Mapping[str, Any]]:
    try:
        listed = custom.list_cluster_custom_object(
            DRA_GROUP, version, "resourceclaims", _request_timeout=timeout
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
