"""Read GPU nodes from the GPUNode objects the coordinator mirrors into the Kubernetes API.

This is the default path: it needs nothing but the user's kubeconfig, and who may see what
is plain RBAC on `gpunodes.gpuctl.dev`. A fresh report is asked for through the API too: the
CLI writes `spec.inspectRequest` with a new id and watches until the coordinator writes
`status.answeredInspectRequest` with that id (or `status.inspectError` saying why not).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.custom_watch import HistoryGoneError, watch_events
from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_client import request_timeout
from gpuctl.cli.kube_errors import (
    call_api,
    describe_api_error,
    is_missing_object,
    unreachable,
)
from gpuctl.cli.node_rollout import rollout_line
from gpuctl.cli.node_view import NodeView, from_gpunode
from gpuctl.common import names, timestamps
from gpuctl.rollout.input.pod_facts import PodFacts, node_pod_facts

# How long one watch request lasts before it is opened again (the server may end it sooner).
_WATCH_SECONDS = 300
_CHANGES = ("ADDED", "MODIFIED", "DELETED")


class KubeNodeSource:
    def __init__(
        self,
        api_client: Any,
        clock: Callable[[], datetime.datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api: Any = client.CustomObjectsApi(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self._api_client = api_client
        self._server = str(api_client.configuration.host)
        self._timeout = request_timeout(api_client)
        self._clock = clock
        self._monotonic = monotonic

    def list_objects(self) -> list[dict[str, Any]]:
        """Every GPUNode, as the API server serves it."""
        return self.list_with_version()[0]

    def list_with_version(self) -> tuple[list[dict[str, Any]], str | None]:
        """Every GPUNode, and the list's resourceVersion to watch from."""
        listed = self._call(
            "list",
            lambda: self._api.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.GPUNODE_PLURAL, _request_timeout=self._timeout
            ),
        )
        return list(listed.get("items", [])), (listed.get("metadata") or {}).get("resourceVersion")

    def changes(self, resource_version: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every change of a GPUNode after `resource_version`, as (ADDED|MODIFIED|DELETED,
        object), for ever. The server ends a watch now and then: it is opened again where
        it left off; where that place is gone from the server's history (410 Gone), the
        GPUNodes are listed again and each is given as MODIFIED, so nothing is missed."""
        while True:
            try:
                for kind, obj in watch_events(
                    self._api,
                    names.GPUNODE_PLURAL,
                    names.GPUNODES,
                    self._server,
                    resource_version=resource_version,
                    timeout_seconds=_WATCH_SECONDS,
                ):
                    if kind in _CHANGES:
                        resource_version = obj.get("metadata", {}).get("resourceVersion")
                        yield kind, dict(obj)
            except HistoryGoneError:
                objects, resource_version = self.list_with_version()
                yield from (("MODIFIED", obj) for obj in objects)

    def node_names(self, selector: str) -> set[str]:
        """The names of the Nodes the label selector matches (`kubectl get nodes -l`)."""
        listed = call_api(
            "list",
            f"nodes matching {selector!r}",
            self._server,
            lambda: self._core.list_node(label_selector=selector, _request_timeout=self._timeout),
        )
        return {str(node.metadata.name) for node in listed.items}

    def list_nodes(self) -> Sequence[NodeView]:
        now = self._clock()
        return [from_gpunode(obj, now) for obj in self.list_objects()]

    def get_node(self, name: str, *, fresh: bool, timeout: float) -> NodeView:
        obj = self._get(name)
        if fresh:
            obj = self._request_fresh(name, timeout)
        return from_gpunode(obj, self._clock())

    def pods_on(self, name: str) -> Sequence[PodFacts] | None:
        """The node's pods, or None when they cannot be listed (the clients stay UIDs)."""
        try:
            listed = self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}", _request_timeout=self._timeout
            )
        except (ApiException, OSError, urllib3.exceptions.HTTPError):
            return None
        pods = [self._api_client.sanitize_for_serialization(p) for p in listed.items]
        return node_pod_facts(pods)

    def rollout_of(self, name: str) -> str:
        """The Node's rollout phase and reason; why not, when the Node cannot be read."""
        try:
            node = self._core.read_node(name, _request_timeout=self._timeout)
        except ApiException as error:
            return rollout_line(None, describe_api_error(error, "get", "nodes", self._server))
        except (OSError, urllib3.exceptions.HTTPError) as error:
            return rollout_line(None, str(error))
        return rollout_line(self._api_client.sanitize_for_serialization(node))

    def _get(self, name: str) -> Mapping[str, Any]:
        try:
            found: Mapping[str, Any] = self._api.get_cluster_custom_object(
                names.GROUP,
                names.VERSION,
                names.GPUNODE_PLURAL,
                name,
                _request_timeout=self._timeout,
            )
        except ApiException as error:
            if is_missing_object(error, name):
                raise CommandError(
                    f'no GPU node "{name}": no agent has reported for it (see `gpuctl nodes`)'
                ) from error
            raise CommandError(
                describe_api_error(error, "get", names.GPUNODES, self._server)
            ) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise unreachable(self._server, error) from error
        return found

    def _request_fresh(self, name: str, timeout: float) -> Mapping[str, Any]:
        request_id = uuid.uuid4().hex
        requested_at = timestamps.format_seconds(self._clock())
        body = {"spec": {"inspectRequest": {"id": request_id, "requestedAt": requested_at}}}
        patched: Mapping[str, Any] = self._call(
            "patch",
            lambda: self._api.patch_cluster_custom_object(
                names.GROUP,
                names.VERSION,
                names.GPUNODE_PLURAL,
                name,
                body,
                _request_timeout=self._timeout,
            ),
        )
        if _answered(patched, request_id):
            return _checked(patched, name)
        deadline = self._monotonic() + timeout
        resource_version = patched.get("metadata", {}).get("resourceVersion")
        while (remaining := deadline - self._monotonic()) > 0:
            answer = self._watch_for_answer(name, request_id, resource_version, remaining)
            if answer is not None:
                return _checked(answer, name)
            resource_version = None  # the watch ended (expired): start over from a fresh get
            latest = self._get(name)
            if _answered(latest, request_id):
                return _checked(latest, name)
            resource_version = latest.get("metadata", {}).get("resourceVersion")
        raise CommandError(
            f'no fresh report for "{name}" within {timeout:g}s: is gpuctl-coordinator '
            "running, and is the node's agent connected?"
        )

    def _watch_for_answer(
        self, name: str, request_id: str, resource_version: str | None, remaining: float
    ) -> Mapping[str, Any] | None:
        try:
            for _, obj in watch_events(
                self._api,
                names.GPUNODE_PLURAL,
                names.GPUNODES,
                self._server,
                resource_version=resource_version,
                timeout_seconds=remaining,
                field_selector=f"metadata.name={name}",
            ):
                if _answered(obj, request_id):
                    return obj
        except HistoryGoneError:  # our resourceVersion is too old: relist
            return None
        return None

    def _call(self, verb: str, action: Callable[[], Any]) -> Any:
        return call_api(verb, names.GPUNODES, self._server, action)


def _answered(obj: Mapping[str, Any], request_id: str) -> bool:
    status = obj.get("status") or {}
    return bool(status.get("answeredInspectRequest") == request_id)


def _checked(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    problem = (obj.get("status") or {}).get("inspectError")
    if problem:
        raise CommandError(f'the coordinator could not get a fresh report for "{name}": {problem}')
    return obj
