"""The support bundle's archive: its files, what could not be read, Pod logs, the README.

`Bundle` gathers files by their path in the archive and the reads that failed (`attempt`
turns a refused or failed read into a line of errors.txt, so a missing file is never taken
for "there was nothing"); `add_logs` reads every container's log of a Pod, and the previous
container's too where it restarted (`kubectl logs --previous`); `write_archive` writes the
.tar.gz with README.txt, which says what each file is (`FILES`).
"""

from __future__ import annotations

import functools
import io
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_errors import describe_api_error
from gpuctl.cli.object_output import render_document

HTTP_NOT_FOUND = 404
# Every file a bundle may hold, and what it is: README.txt says it inside the archive.
FILES = {
    "versions.yaml": "this CLI's, the coordinator's (its Lease) and the agents' versions",
    "gpudrivers.yaml": "every GPUDriver, status included",
    "gpunodes.yaml": "every GPUNode: each agent's latest report",
    "modules.yaml": "KMM's Modules",
    "nodemodulesconfigs.yaml": "KMM's record per node of what it loads and loaded, in which boot",
    "moduleimagesconfigs.yaml": "KMM's record of which driver images exist",
    "nodes.yaml": "every Node: labels (gpuctl's state, KMM's versions), taints, conditions",
    "events.yaml": "Events of the release namespace and of every GPUDriver",
    "node-events.yaml": "Events of the GPU nodes (those with a GPUNode)",
    "workloads.yaml": "gpuctl's Deployments and DaemonSets, status included",
    "admission.yaml": "gpuctl's ValidatingAdmissionPolicies and their bindings (the guards)",
    "kmm-pods.yaml": "KMM's worker, build, sign and pull Pods in the release namespace",
    "kmm-operator-pods.yaml": "KMM's operator Pods (app.kubernetes.io/name=kmm), any namespace",
    "logs/<pod>_<container>.log": "the logs of gpuctl's Pods (coordinator, agents)",
    "logs/kmm/<pod>_<container>.log": "the logs of KMM's worker, build, sign and pull Pods",
    "logs/kmm-operator/<pod>_<container>.log": "the logs of KMM's operator",
    "logs/.../<pod>_<container>.previous.log": "a restarted container's log before the restart",
    "errors.txt": "what could not be collected, and why (empty: everything was)",
}


@dataclass
class Bundle:
    """Files by path inside the archive, and what could not be collected."""

    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, path: str, document: Any) -> None:
        self.files[path] = render_document(document, "yaml").encode()

    def attempt(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except ApiException as err:
            self.errors.append(f"{what}: {describe_api_error(err, 'read', what, '')}")
        except (OSError, urllib3.exceptions.HTTPError, CommandError) as err:
            self.errors.append(f"{what}: {err}")
        return None


def plain(api_client: Any, answer: Any) -> dict[str, Any]:
    """A typed client answer as the API serves it (camelCase keys)."""
    served: dict[str, Any] = api_client.sanitize_for_serialization(answer)
    return served


def _restarted(pod: dict[str, Any]) -> set[str]:
    status = pod.get("status") or {}
    found = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    return {str(c.get("name")) for c in found if int(c.get("restartCount") or 0) > 0}


def add_logs(
    bundle: Bundle, core: Any, pod: dict[str, Any], *, folder: str, lines: int, timeout: float
) -> None:
    """Every container's log of `pod` under `folder`, and the previous one's where it
    restarted."""
    namespace = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    restarted = _restarted(pod)
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        cname = container["name"]
        for previous in (False, True) if cname in restarted else (False,):
            what = f"{'previous ' if previous else ''}log of {namespace}/{name} container {cname}"
            read = functools.partial(
                core.read_namespaced_pod_log,
                name,
                namespace,
                container=cname,
                previous=previous,
                tail_lines=lines,
                _request_timeout=timeout,
            )
            text = bundle.attempt(what, functools.partial(_log_text, read))
            if text is not None:
                suffix = ".previous.log" if previous else ".log"
                bundle.files[f"{folder}{name}_{cname}{suffix}"] = str(text).encode()


# In a log file whose Pod went between the list and the read: KMM's worker Pods come and go
# by the second, and one deleted meanwhile is no failure to read.
GONE = "(gpuctl support-bundle: the Pod was deleted before its log was read)\n"


def _log_text(read: Callable[[], str | None]) -> str:
    """The client answers None for an empty log; None from attempt() means it failed."""
    try:
        return read() or ""
    except ApiException as err:
        if err.status == HTTP_NOT_FOUND:
            return GONE
        raise


def readme() -> str:
    lines = [
        "gpuctl support bundle: the objects as the API served them (YAML Lists), Pod logs and",
        "versions, read with the credentials of whoever ran it. No Secret was read.",
        "",
    ]
    lines += [f"{name:<42} {what}" for name, what in FILES.items()]
    return "\n".join(lines) + "\n"


def write_archive(bundle: Bundle, path: Path, root: str) -> None:
    files = {"README.txt": readme().encode(), **bundle.files}
    files["errors.txt"] = "".join(f"{line}\n" for line in bundle.errors).encode()
    with tarfile.open(path, "w:gz") as archive:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            archive.addfile(info, io.BytesIO(data))
