"""What a support bundle reads beyond gpuctl's own objects: KMM's Pods and operator, the GPU
nodes' Events, gpuctl's workloads and admission guards.

A Blocked or Failed node's first question is usually KMM's: what its worker Pod on the node
did (its log, and the previous container's where it restarted), whether its operator saw the
Module, what the kubelet said of the node. KMM's worker, build, sign and pull Pods of
gpuctl's Modules live in the release namespace and carry KMM's labels (keys under
`kmm.node.kubernetes.io/`: KMM v2.6.0 internal/pod/workerpodmanager.go, internal/constants);
its operator's Pods carry `app.kubernetes.io/name=kmm` (KMM's config/default), in whatever
namespace it was installed. The chart's own objects carry `app.kubernetes.io/name=gpuctl`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client

from gpuctl.cli.bundle import Bundle, add_logs, plain
from gpuctl.cli.kube_client import request_timeout as timeout_of
from gpuctl.cli.object_output import as_list

GPUCTL_LABEL = "app.kubernetes.io/name=gpuctl"
KMM_OPERATOR_LABEL = "app.kubernetes.io/name=kmm"
KMM_LABEL_PREFIX = "kmm.node.kubernetes.io/"


def is_kmm_pod(pod: Mapping[str, Any]) -> bool:
    """A Pod KMM made (a worker, build, sign or pull Pod): one of its labels is KMM's (pure)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return any(key.startswith(KMM_LABEL_PREFIX) for key in labels)


def gpu_node_events(events: Sequence[Mapping[str, Any]], gpu_nodes: set[str]) -> list[Any]:
    """The Node Events of the nodes named (pure)."""
    return [e for e in events if (e.get("involvedObject") or {}).get("name") in gpu_nodes]


def add_kmm_pods(
    bundle: Bundle, api_client: Any, namespace: str, *, lines: int, timeout: float
) -> None:
    core: Any = client.CoreV1Api(api_client)
    listed = bundle.attempt(
        f"pods in {namespace}",
        lambda: plain(api_client, core.list_namespaced_pod(namespace, _request_timeout=timeout)),
    )
    if listed is None:
        return
    kmm = [pod for pod in listed.get("items", []) if is_kmm_pod(pod)]
    bundle.add("kmm-pods.yaml", as_list(kmm))
    for pod in kmm:
        add_logs(bundle, core, pod, folder="logs/kmm/", lines=lines, timeout=timeout)


def add_kmm_operator(bundle: Bundle, api_client: Any, *, lines: int, timeout: float) -> None:
    core: Any = client.CoreV1Api(api_client)
    listed = bundle.attempt(
        "KMM's operator pods",
        lambda: plain(
            api_client,
            core.list_pod_for_all_namespaces(
                label_selector=KMM_OPERATOR_LABEL, _request_timeout=timeout
            ),
        ),
    )
    if listed is None:
        return
    bundle.add("kmm-operator-pods.yaml", as_list(listed.get("items", [])))
    for pod in listed.get("items", []):
        add_logs(bundle, core, pod, folder="logs/kmm-operator/", lines=lines, timeout=timeout)


def events_of_kind(bundle: Bundle, api_client: Any, kind: str, timeout: float) -> Any:
    """Every Event about an object of `kind`, in any namespace (None: not read)."""
    core: Any = client.CoreV1Api(api_client)
    return bundle.attempt(
        f"events of {kind}s",
        lambda: plain(
            api_client,
            core.list_event_for_all_namespaces(
                field_selector=f"involvedObject.kind={kind}", _request_timeout=timeout
            ),
        ),
    )


def add_node_events(bundle: Bundle, api_client: Any, gpu_nodes: set[str], timeout: float) -> None:
    listed = events_of_kind(bundle, api_client, "Node", timeout)
    if listed is not None:
        bundle.add("node-events.yaml", as_list(gpu_node_events(listed["items"], gpu_nodes)))


def _gpuctl_objects(
    bundle: Bundle, api_client: Any, file: str, reads: Sequence[tuple[str, Callable[..., Any]]]
) -> None:
    """The chart's objects (app.kubernetes.io/name=gpuctl) each list call reads, in one file;
    an empty List only where the lists were read."""
    found: list[Any] | None = None
    for what, read in reads:
        listed = bundle.attempt(
            what,
            functools.partial(
                read, label_selector=GPUCTL_LABEL, _request_timeout=timeout_of(api_client)
            ),
        )
        if listed is not None:
            found = (found or []) + plain(api_client, listed)["items"]
    if found is not None:
        bundle.add(file, as_list(found))


def add_workloads(bundle: Bundle, api_client: Any, namespace: str) -> None:
    apps: Any = client.AppsV1Api(api_client)
    reads = (
        (
            f"deployments in {namespace}",
            functools.partial(apps.list_namespaced_deployment, namespace),
        ),
        (
            f"daemonsets in {namespace}",
            functools.partial(apps.list_namespaced_daemon_set, namespace),
        ),
    )
    _gpuctl_objects(bundle, api_client, "workloads.yaml", reads)


def add_admission(bundle: Bundle, api_client: Any) -> None:
    admission: Any = client.AdmissionregistrationV1Api(api_client)
    reads = (
        ("validatingadmissionpolicies", admission.list_validating_admission_policy),
        ("validatingadmissionpolicybindings", admission.list_validating_admission_policy_binding),
    )
    _gpuctl_objects(bundle, api_client, "admission.yaml", reads)
