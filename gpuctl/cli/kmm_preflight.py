"""Ask KMM whether each Module's image exists for a kernel: its PreflightValidation (v1beta2).

KMM checks every Module against `spec.kernelVersion`: it picks the Module's mapping for that
kernel, makes a ModuleImagesConfig `<module>-preflight` and pulls (or builds and signs) the
image the way a node would, then writes per Module `verificationStatus` Success or Failure
with a `statusReason` ("verified image exists", "verified image does not exist", "mapping not
found"). `check_images` creates one, waits for the Modules asked about, and deletes it (KMM's
ModuleImagesConfig goes with it: it is owned by the PreflightValidation). A KMM that does not
serve v1beta2 (its CRD missing), or no answer in time, leaves the image unknown.

KMM v2.6.0 marks an image missing only where it could build or sign it: for a plain image
its pull Pod (label kmm.node.kubernetes.io/image-owner=<module>-preflight) waits until the
image appears and the PreflightValidation stays InProgress. So the pull Pod's own state is
read too: a container waiting with the kubelet's ErrImagePull or ImagePullBackOff is the
image missing, in the kubelet's words.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_errors import call_api, describe_api_error, is_missing_object
from gpuctl.cli.preflight_verdict import ImageCheck
from gpuctl.common import names

POLL_SECONDS = 1.0
DEFAULT_TIMEOUT_SECONDS = 300.0
HTTP_NOT_FOUND = 404
_DONE = {"Success": True, "Failure": False}


def add_timeout_flag(parser: argparse.ArgumentParser, *, when: str = "") -> None:
    """--timeout: how long a command waits for KMM's image check (`when`: the flag it goes
    with, for the help)."""
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="S",
        help=f"{when}how long to wait for KMM's image check (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )


def _api(api_client: Any) -> tuple[Any, str]:
    return client.CustomObjectsApi(api_client), str(api_client.configuration.host)


def check_images(
    api_client: Any,
    kernel: str,
    modules: Iterable[tuple[str, str]],
    *,
    timeout: float,
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> dict[tuple[str, str], ImageCheck]:
    """(namespace, Module name) -> what KMM found for `kernel`."""
    wanted = sorted(set(modules))
    if not wanted:
        return {}
    custom, server = _api(api_client)
    body = {
        "apiVersion": f"{names.KMM_GROUP}/{names.KMM_PREFLIGHT_VERSION}",
        "kind": "PreflightValidation",
        "metadata": {"generateName": "gpuctl-preflight-"},
        "spec": {"kernelVersion": kernel},
    }
    try:
        created: Any = custom.create_cluster_custom_object(
            names.KMM_GROUP, names.KMM_PREFLIGHT_VERSION, names.KMM_PREFLIGHT_PLURAL, body
        )
    except ApiException as error:
        if error.status == HTTP_NOT_FOUND:
            why = "KMM does not serve PreflightValidation v1beta2 here: the image was not checked"
            return dict.fromkeys(wanted, ImageCheck(None, why))
        raise CommandError(
            describe_api_error(error, "create", names.KMM_PREFLIGHT_PLURAL, server)
        ) from error
    name = str(created["metadata"]["name"])
    try:
        core = client.CoreV1Api(api_client)
        return _wait(custom, core, server, name, wanted, timeout=timeout, now=now, sleep=sleep)
    finally:
        _delete(custom, server, name)


def _wait(
    custom: Any,
    core: Any,
    server: str,
    name: str,
    wanted: list[tuple[str, str]],
    *,
    timeout: float,
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> dict[tuple[str, str], ImageCheck]:
    deadline = now() + timeout
    while True:
        found: Any = call_api(
            "get",
            f"{names.KMM_PREFLIGHT_PLURAL}.{names.KMM_GROUP}/{name}",
            server,
            lambda: custom.get_cluster_custom_object(
                names.KMM_GROUP, names.KMM_PREFLIGHT_VERSION, names.KMM_PREFLIGHT_PLURAL, name
            ),
        )
        entries = {
            (str(e.get("namespace")), str(e.get("name"))): e
            for e in (found.get("status") or {}).get("modules") or []
        }
        checks = {key: _check(name, entries.get(key), timeout) for key in wanted}
        for key, check in checks.items():
            if check.exists is None:
                checks[key] = _pull_failure(core, server, key) or check
        if all(c.exists is not None for c in checks.values()) or now() >= deadline:
            return checks
        sleep(POLL_SECONDS)


def _status(entry: Any) -> str:
    return str((entry or {}).get("verificationStatus") or "")


def _check(name: str, entry: Any, timeout: float) -> ImageCheck:
    status = _status(entry)
    reason = str((entry or {}).get("statusReason") or "")
    if status in _DONE:
        return ImageCheck(_DONE[status], f"KMM: {reason or status} (PreflightValidation {name})")
    waited = f"KMM did not finish checking within {timeout:g}s"
    return ImageCheck(None, f"{waited}: {reason}" if reason else waited)


_PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff")


def _pull_failure(core: Any, server: str, module: tuple[str, str]) -> ImageCheck | None:
    """The image missing, as the kubelet says it of KMM's preflight pull Pod; None when no
    pull Pod of the Module's check waits on a failed pull."""
    namespace, name = module
    owner = f"{names.KMM_IMAGE_OWNER_LABEL}={name}{names.KMM_PREFLIGHT_SUFFIX}"
    pods: Any = call_api(
        "list",
        f"pods in {namespace}",
        server,
        lambda: core.list_namespaced_pod(namespace, label_selector=owner),
    )
    for pod in pods.items:
        for container in (pod.status and pod.status.container_statuses) or []:
            waiting = container.state and container.state.waiting
            if waiting is not None and waiting.reason in _PULL_FAILURES:
                return ImageCheck(False, f"{waiting.reason}: {waiting.message or 'not found'}")
    return None


def _delete(custom: Any, server: str, name: str) -> None:
    try:
        custom.delete_cluster_custom_object(
            names.KMM_GROUP, names.KMM_PREFLIGHT_VERSION, names.KMM_PREFLIGHT_PLURAL, name
        )
    except ApiException as error:
        if not is_missing_object(error, name):
            raise
