"""`gpuctl support-bundle`: what a maintainer needs to see a fleet's state, in one archive.

It reads, with the caller's own credentials: the versions (`gpuctl version`'s document), the
GPUDrivers and GPUNodes, KMM's Modules, NodeModulesConfigs and ModuleImagesConfigs, the Nodes,
the Events of the release namespace and of every GPUDriver, and the logs of the gpuctl Pods of
the release namespace (coordinator and agents, every container); and beyond gpuctl's own
(gpuctl/cli/bundle_kmm.py) the GPU nodes' Events, gpuctl's workloads and admission guards, and
KMM's Pods with their logs. The archive itself is gpuctl/cli/bundle.py. It never reads a Secret, so
no key or token can end up in the archive. What cannot be read (no permission, no such API,
a Pod without logs) is written to `errors.txt` with why, and the rest is still collected:
a missing file is never mistaken for "there was nothing".
"""

from __future__ import annotations

import argparse
import functools
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client

from gpuctl.cli.bundle import Bundle, add_logs, plain, write_archive
from gpuctl.cli.bundle_kmm import (
    GPUCTL_LABEL,
    add_admission,
    add_kmm_operator,
    add_kmm_pods,
    add_node_events,
    add_workloads,
    events_of_kind,
)
from gpuctl.cli.coordinator_lease import find_lease
from gpuctl.cli.errors import CommandError
from gpuctl.cli.help_format import examples, with_examples
from gpuctl.cli.kube_client import load_api_client, request_timeout
from gpuctl.cli.object_output import as_list
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


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "support-bundle",
        help="collect GPUDrivers, GPUNodes, KMM's objects, Nodes, Events, logs and versions "
        "into one archive (never a Secret)",
        description=(
            "Collect what a maintainer needs into one .tar.gz: versions, GPUDrivers, GPUNodes, "
            "KMM's Modules, NodeModulesConfigs and ModuleImagesConfigs, Nodes, Events (the "
            "release namespace's, every GPUDriver's, the GPU nodes'), gpuctl's Deployments, "
            "DaemonSets and admission guards, KMM's worker, build, sign and pull Pods and its "
            "operator's, and the logs of all those Pods (the previous container's too where one "
            "restarted). Secrets are never read. README.txt in the archive says what each file "
            "is; what could not be read is listed in errors.txt."
        ),
        epilog=with_examples(
            "exit codes: 0 written (errors.txt lists what was missing); 1 nothing could be "
            "read or the file could not be written.",
            examples(
                ("gpuctl support-bundle", "gpuctl-support-<time>.tar.gz here"),
                ("gpuctl support-bundle -n gpu-system -f /tmp/bundle.tar.gz", ""),
            ),
        ),
    )
    parser.add_argument(
        "-n",
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


def collect(api_client: Any, namespace: str, log_lines: int, lease: str | None = None) -> Bundle:
    bundle = Bundle()
    timeout = request_timeout(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    core: Any = client.CoreV1Api(api_client)
    versions = bundle.attempt("versions", lambda: _versions(api_client, namespace, lease))
    if versions is not None:
        bundle.add("versions.yaml", versions)
    gpu_nodes: set[str] = set()
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
            if plural == names.GPUNODE_PLURAL:
                gpu_nodes = {str(n["metadata"]["name"]) for n in listed.get("items") or []}
    nodes = bundle.attempt(
        "nodes", lambda: plain(api_client, core.list_node(_request_timeout=timeout))
    )
    if nodes is not None:
        bundle.add("nodes.yaml", as_list(nodes["items"]))
    events = bundle.attempt(
        f"events in {namespace}",
        lambda: plain(api_client, core.list_namespaced_event(namespace, _request_timeout=timeout)),
    )
    driver_events = events_of_kind(bundle, api_client, "GPUDriver", timeout)
    if events is not None or driver_events is not None:
        items = (events or {}).get("items", []) + (driver_events or {}).get("items", [])
        bundle.add("events.yaml", as_list(items))
    pods = bundle.attempt(
        f"pods in {namespace}",
        lambda: plain(
            api_client,
            core.list_namespaced_pod(
                namespace, label_selector=GPUCTL_LABEL, _request_timeout=timeout
            ),
        ),
    )
    for pod in (pods or {}).get("items", []):
        add_logs(bundle, core, pod, folder="logs/", lines=log_lines, timeout=timeout)
    add_node_events(bundle, api_client, gpu_nodes, timeout)
    add_workloads(bundle, api_client, namespace)
    add_admission(bundle, api_client)
    add_kmm_pods(bundle, api_client, namespace, lines=log_lines, timeout=timeout)
    add_kmm_operator(bundle, api_client, lines=log_lines, timeout=timeout)
    return bundle


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
