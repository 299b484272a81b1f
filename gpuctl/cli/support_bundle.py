"""`gpuctl support-bundle`: what a maintainer needs to see a fleet's state, in one archive.

It reads, with the caller's own credentials: the versions (`gpuctl version`'s document), the
GPUDrivers and GPUNodes, KMM's Modules, NodeModulesConfigs and ModuleImagesConfigs, the Nodes,
the Events of the release namespace and of every GPUDriver, and the logs of the gpuctl Pods of
the release namespace (coordinator and agents, every container). It never reads a Secret, so
no key or token can end up in the archive. What cannot be read (no permission, no such API,
a Pod without logs) is written to `errors.txt` with why, and the rest is still collected:
a missing file is never mistaken for "there was nothing".
"""

from __future__ import annotations

import argparse
import functools
import io
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.coordinator_lease import find_lease
from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_client import load_api_client, request_timeout
from gpuctl.cli.kube_errors import describe_api_error
from gpuctl.cli.object_output import as_list, render_document
from gpuctl.cli.source_flags import add_kube_flags
from gpuctl.cli.version_command import add_lease_flag, agent_versions, coordinator_version
from gpuctl.common import names
from gpuctl.common.build_version import gpuctl_version
from gpuctl.common.version_skew import skew_warnings

LOG_LINES = 10_000
# Cluster-wide lists: (file, group, version, plural); "" group is the core API.
CLUSTER_OBJECTS = (
    ("gpudrivers", names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
    ("gpunodes", names.GROUP, names.VERSION, names.GPUNODE_PLURAL),
    ("modules", names.KMM_GROUP, names.KMM_VERSION, names.KMM_MODULE_PLURAL),
    ("nodemodulesconfigs", names.KMM_GROUP, names.KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL),
    ("moduleimagesconfigs", names.KMM_GROUP, names.KMM_VERSION, names.KMM_IMAGES_CONFIG_PLURAL),
)
GPUCTL_PODS = "app.kubernetes.io/name=gpuctl"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "support-bundle",
        help="collect GPUDrivers, GPUNodes, KMM's objects, Nodes, Events, logs and versions "
        "into one archive (never a Secret)",
        description=(
            "Collect what a maintainer needs into one .tar.gz: versions, GPUDrivers, GPUNodes, "
            "KMM's Modules, NodeModulesConfigs and ModuleImagesConfigs, Nodes, Events (the "
            "release namespace's and every GPUDriver's) and the logs of gpuctl's Pods. "
            "Secrets are never read. What could not be read is listed in errors.txt."
        ),
        epilog="exit codes: 0 written (errors.txt lists what was missing); 1 nothing could be "
        "read or the file could not be written.",
    )
    parser.add_argument(
        "--namespace",
        default="gpuctl-system",
        help="gpuctl's release namespace: its Events and Pod logs (default: %(default)s)",
    )
    add_lease_flag(parser)
    parser.add_argument(
        "-f",
        "--file",
        type=Path,
        help="the archive to write (default: gpuctl-support-<UTC time>.tar.gz here)",
    )
    parser.add_argument(
        "--log-lines",
        type=int,
        default=LOG_LINES,
        metavar="N",
        help="the last N lines of each container's log (default: %(default)s)",
    )
    add_kube_flags(parser)
    parser.set_defaults(run=run)


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


def collect(api_client: Any, namespace: str, log_lines: int, lease: str | None = None) -> Bundle:
    bundle = Bundle()
    timeout = request_timeout(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    core: Any = client.CoreV1Api(api_client)
    versions = bundle.attempt("versions", lambda: _versions(api_client, namespace, lease))
    if versions is not None:
        bundle.add("versions.yaml", versions)
    for file, group, version, plural in CLUSTER_OBJECTS:
        listed = bundle.attempt(
            f"{plural}.{group}",
            functools.partial(
                custom.list_cluster_custom_object,
                group,
                version,
                plural,
                _request_timeout=timeout,
            ),
        )
        if listed is not None:
            bundle.add(f"{file}.yaml", as_list(listed.get("items") or []))
    nodes = bundle.attempt(
        "nodes", lambda: _plain(api_client, core.list_node(_request_timeout=timeout))
    )
    if nodes is not None:
        bundle.add("nodes.yaml", as_list(nodes["items"]))
    events = bundle.attempt(
        f"events in {namespace}",
        lambda: _plain(api_client, core.list_namespaced_event(namespace, _request_timeout=timeout)),
    )
    driver_events = bundle.attempt(
        "events of GPUDrivers",
        lambda: _plain(
            api_client,
            core.list_event_for_all_namespaces(
                field_selector="involvedObject.kind=GPUDriver", _request_timeout=timeout
            ),
        ),
    )
    if events is not None or driver_events is not None:
        items = (events or {}).get("items", []) + (driver_events or {}).get("items", [])
        bundle.add("events.yaml", as_list(items))
    pods = bundle.attempt(
        f"pods in {namespace}",
        lambda: _plain(
            api_client,
            core.list_namespaced_pod(
                namespace, label_selector=GPUCTL_PODS, _request_timeout=timeout
            ),
        ),
    )
    for pod in (pods or {}).get("items", []):
        _logs(bundle, core, pod, lines=log_lines, timeout=timeout)
    return bundle


def _plain(api_client: Any, answer: Any) -> dict[str, Any]:
    """A typed client answer as the API serves it (camelCase keys)."""
    plain: dict[str, Any] = api_client.sanitize_for_serialization(answer)
    return plain


def _versions(api_client: Any, namespace: str, asked: str | None) -> dict[str, Any]:
    lease = find_lease(api_client, namespace, asked)
    version, holder = coordinator_version(api_client, namespace, lease)
    agents = agent_versions(api_client)
    return {
        "client": gpuctl_version(),
        "coordinator": {"version": version, "holder": holder, "lease": f"{namespace}/{lease}"},
        "agents": agents,
        "warnings": skew_warnings(gpuctl_version(), version, agents),
    }


def _logs(bundle: Bundle, core: Any, pod: dict[str, Any], *, lines: int, timeout: float) -> None:
    namespace = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        what = f"log of {namespace}/{name} container {container['name']}"
        read = functools.partial(
            core.read_namespaced_pod_log,
            name,
            namespace,
            container=container["name"],
            tail_lines=lines,
            _request_timeout=timeout,
        )
        text = bundle.attempt(what, functools.partial(_log_text, read))
        if text is not None:
            bundle.files[f"logs/{name}_{container['name']}.log"] = str(text).encode()


def _log_text(read: Callable[[], str | None]) -> str:
    """The client answers None for an empty log; None from attempt() means it failed."""
    return read() or ""


def write_archive(bundle: Bundle, path: Path, root: str) -> None:
    readme = (
        "gpuctl support bundle: the objects as the API served them (YAML Lists), Pod logs, "
        "versions. No Secret was read. errors.txt: what could not be collected, and why.\n"
    )
    files = {"README.txt": readme.encode(), **bundle.files}
    files["errors.txt"] = "".join(f"{line}\n" for line in bundle.errors).encode()
    with tarfile.open(path, "w:gz") as archive:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            archive.addfile(info, io.BytesIO(data))


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    root = f"gpuctl-support-{stamp}"
    path = args.file or Path(f"{root}.tar.gz")
    api_client = load_api_client(args.kubeconfig, args.context, args.request_timeout)
    bundle = collect(api_client, args.namespace, args.log_lines, args.lease)
    if not bundle.files:
        raise CommandError("nothing could be read: " + "; ".join(bundle.errors))
    try:
        write_archive(bundle, path, root)
    except OSError as err:
        raise CommandError(f"cannot write {path}: {err}") from err
    out.write(f"wrote {path}: {len(bundle.files)} files")
    out.write(f", {len(bundle.errors)} could not be read (errors.txt)\n" if bundle.errors else "\n")
    return 0
