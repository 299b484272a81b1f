"""The Kubernetes calls `gpuctl driver abandon` makes: find a GPUDriver's Modules, Nodes and
Leases; annotate and delete a Module; release the GPUDriver; patch a Node.

Every call goes through `call_api`, so a refusal or an unreachable server is a CommandError
saying which call and why; nothing here decides what to change (gpuctl/cli/abandon_plan.py).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_client import request_timeout
from gpuctl.cli.kube_errors import call_api, describe_api_error
from gpuctl.common import names
from gpuctl.rollout.step.worker_hold import held_in, hold_list


def _json(response: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(response.data)
    return loaded


class AbandonApi:
    """`server_dry_run`: every write is sent with dryRun=All (admission, validation and RBAC
    run, nothing is stored); the Module's delete, which its guard judges by the annotation a
    dry run does not store, is asked of RBAC instead (a SelfSubjectAccessReview)."""

    def __init__(self, api_client: Any, *, server_dry_run: bool = False) -> None:
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self._leases: Any = client.CoordinationV1Api(api_client)
        self._authorization: Any = client.AuthorizationV1Api(api_client)
        self._server = str(api_client.configuration.host)
        self._timeout = request_timeout(api_client)
        self._dry = server_dry_run

    def _write_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"_request_timeout": self._timeout}
        if self._dry:
            options["dry_run"] = "All"
        return options

    def driver(self, name: str) -> dict[str, Any] | None:
        """The GPUDriver, or None if it is gone."""
        try:
            return _json(
                self._custom.get_cluster_custom_object(
                    names.GROUP,
                    names.VERSION,
                    names.GPUDRIVER_PLURAL,
                    name,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise CommandError(
                describe_api_error(error, "get", names.GPUDRIVERS, self._server)
            ) from error

    def modules(self, driver: str) -> list[dict[str, Any]]:
        """The KMM Modules the coordinator wrote for `driver` (labelled with it), in every
        namespace; none when KMM's CRD is not installed."""
        try:
            listed = _json(
                self._custom.list_cluster_custom_object(
                    names.KMM_GROUP,
                    names.KMM_VERSION,
                    names.KMM_MODULE_PLURAL,
                    label_selector=f"{names.DRIVER_LABEL}={driver}",
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as error:
            if error.status == 404:
                return []
            raise CommandError(
                describe_api_error(error, "list", names.KMM_MODULES, self._server)
            ) from error
        return list(listed.get("items") or [])

    def nodes(self) -> list[dict[str, Any]]:
        listed = call_api(
            "list",
            "nodes",
            self._server,
            lambda: _json(
                self._core.list_node(_preload_content=False, _request_timeout=self._timeout)
            ),
        )
        return list(listed.get("items") or [])

    def leases(self, namespace: str) -> list[dict[str, Any]]:
        listed = call_api(
            "list",
            f"leases in {namespace}",
            self._server,
            lambda: _json(
                self._leases.list_namespaced_lease(
                    namespace, _preload_content=False, _request_timeout=self._timeout
                )
            ),
        )
        return list(listed.get("items") or [])

    def delete_module(self, module: Mapping[str, Any], reason: str) -> None:
        """Annotate the Module with the reason (the guard's way out, audited), then delete it."""
        meta = module["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        args = (names.KMM_GROUP, names.KMM_VERSION, namespace, names.KMM_MODULE_PLURAL, name)
        body = {"metadata": {"annotations": {names.ALLOW_DELETE_ANNOTATION: reason}}}
        call_api(
            "annotate",
            f"Module {namespace}/{name}",
            self._server,
            lambda: self._custom.patch_namespaced_custom_object(
                *args, body, **self._write_options()
            ),
        )
        if self._dry:
            self._may_delete_module(namespace, name)
            return
        call_api(
            "delete",
            f"Module {namespace}/{name}",
            self._server,
            lambda: self._custom.delete_namespaced_custom_object(
                *args, _request_timeout=self._timeout
            ),
        )

    def _may_delete_module(self, namespace: str, name: str) -> None:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "group": names.KMM_GROUP,
                    "resource": names.KMM_MODULE_PLURAL,
                    "verb": "delete",
                    "namespace": namespace,
                    "name": name,
                }
            },
        }
        answer: Any = call_api(
            "create",
            "selfsubjectaccessreviews",
            self._server,
            lambda: self._authorization.create_self_subject_access_review(
                review, _request_timeout=self._timeout
            ),
        )
        if not answer.status.allowed:
            raise CommandError(
                f"you may not delete Module {namespace}/{name} (RBAC: "
                f"{answer.status.reason or 'no rule allows it'})"
            )

    def release_driver(self, driver: Mapping[str, Any]) -> None:
        """Take gpuctl's finalizer off the GPUDriver (others stay), conditionally on the
        version read."""
        meta = driver["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != names.FINALIZER]
        body = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
        call_api(
            "patch",
            names.GPUDRIVERS,
            self._server,
            lambda: self._custom.patch_cluster_custom_object(
                names.GROUP,
                names.VERSION,
                names.GPUDRIVER_PLURAL,
                meta["name"],
                body,
                **self._write_options(),
            ),
        )

    def drop_worker_holds(self, namespace: str, nodes: Collection[str]) -> None:
        """Takes `nodes` out of the namespace's KMM worker hold list (names.KMM_WORKER_HOLDS):
        with the coordinator gone nobody else rewrites it, and a node it still names would
        have KMM's worker refused there for ever."""
        if not nodes:
            return
        where = f"namespace {namespace}"
        found: Any = call_api(
            "get",
            where,
            self._server,
            lambda: self._core.read_namespace(namespace, _request_timeout=self._timeout),
        )
        listed = held_in((found.metadata.annotations or {}).get(names.KMM_WORKER_HOLDS))
        if not listed & set(nodes):
            return
        body = {
            "metadata": {
                "resourceVersion": found.metadata.resource_version,
                "annotations": {names.KMM_WORKER_HOLDS: hold_list(listed - set(nodes)) or None},
            }
        }
        call_api(
            "patch",
            where,
            self._server,
            lambda: self._core.patch_namespace(namespace, body, **self._write_options()),
        )

    def patch_node(self, node: str, body: Mapping[str, Any]) -> None:
        call_api(
            "patch",
            f"node {node}",
            self._server,
            lambda: self._core.patch_node(node, body, **self._write_options()),
        )
