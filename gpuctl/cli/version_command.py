"""`gpuctl version`: this CLI's version, the coordinator's (from the Lease its leader holds)
and the agents' (from the GPUNodes they report through, counted by version), with a warning
for each unsupported skew (gpuctl.common.version_skew)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.coordinator_lease import find_lease
from gpuctl.cli.help_format import examples, with_examples
from gpuctl.cli.kube_client import load_api_client, request_timeout
from gpuctl.cli.kube_errors import call_api, is_missing_object
from gpuctl.cli.object_output import add_output, render_document
from gpuctl.cli.source_flags import add_kube_flags
from gpuctl.common import names
from gpuctl.common.build_version import gpuctl_version
from gpuctl.common.version_skew import skew_warnings

DEFAULT_NAMESPACE = "gpuctl-system"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "version",
        help="the versions of this CLI, the coordinator and the agents, and their skew",
        description=(
            "Print this gpuctl's version, the coordinator's (written by its leader on the "
            "leader-election Lease) and the agents' (each GPUNode's agentVersion, counted by "
            "version), and warn about each pair outside the supported skew: agents and CLI "
            "within one minor release of the coordinator (docs/deploying.md#version-skew)."
        ),
        epilog=with_examples(
            "exit codes: 0 printed (warnings included); 1 the cluster could not be read (the "
            "client's line is printed first, as kubectl's).",
            examples(
                ("gpuctl version", "this CLI, the coordinator and the agents"),
                ("gpuctl version -n gpu-system -o yaml", "a release in another namespace"),
                ("gpuctl version --client", "no cluster"),
            ),
        ),
    )
    parser.add_argument(
        "--client", action="store_true", help="print only this CLI's version; no cluster"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="the coordinator's namespace (the chart's release namespace; default: %(default)s)",
    )
    add_lease_flag(parser)
    add_output(
        parser,
        ("table", "json", "yaml"),
        "table (default): lines for people; json or yaml: the versions as data",
    )
    add_kube_flags(parser)
    parser.set_defaults(run=run)


def add_lease_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lease",
        metavar="NAME",
        help=(
            "the coordinator's leader-election Lease, <release fullname>-coordinator (default: "
            f"{names.DEFAULT_COORDINATOR_LEASE}, else the one Lease of --namespace a gpuctl "
            "coordinator annotated: a release of another name is found by itself)"
        ),
    )


def coordinator_version(api_client: Any, namespace: str, lease: str) -> tuple[str | None, str]:
    """(version, holder) from the Lease; version None when the Lease is missing or carries
    none (a coordinator before this annotation, or none running)."""
    server = str(api_client.configuration.host)
    api: Any = client.CoordinationV1Api(api_client)

    def read() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = api.read_namespaced_lease(
                lease, namespace, _request_timeout=request_timeout(api_client)
            ).to_dict()
        except ApiException as err:
            if is_missing_object(err, lease):
                return None
            raise
        return found

    obj = call_api("get", f"lease {namespace}/{lease}", server, read)
    if obj is None:
        return None, ""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    holder = str((obj.get("spec") or {}).get("holder_identity") or "")
    return annotations.get(names.COORDINATOR_VERSION), holder


def agent_versions(api_client: Any) -> dict[str, int]:
    server = str(api_client.configuration.host)
    api: Any = client.CustomObjectsApi(api_client)
    listed: dict[str, Any] = call_api(
        "list",
        names.GPUNODES,
        server,
        lambda: api.list_cluster_custom_object(
            names.GROUP,
            names.VERSION,
            names.GPUNODE_PLURAL,
            _request_timeout=request_timeout(api_client),
        ),
    )
    counts: dict[str, int] = {}
    for item in listed.get("items") or []:
        version = str((item.get("status") or {}).get("agentVersion") or "unknown")
        counts[version] = counts.get(version, 0) + 1
    return counts


def client_line(document: Mapping[str, Any]) -> str:
    return f"Client:       gpuctl {document['client']}\n"


def render(document: Mapping[str, Any]) -> str:
    return client_line(document) + cluster_lines(document)


def cluster_lines(document: Mapping[str, Any]) -> str:
    """The coordinator's and the agents' versions, and the skew warnings ("" without them)."""
    lines = []
    if "coordinator" in document:
        coordinator = document["coordinator"]
        where = f"Lease {coordinator['lease']}"
        if coordinator["version"] is None:
            lines.append(f"Coordinator:  unknown (no version on {where})")
        else:
            holder = f", leader {coordinator['holder']}" if coordinator["holder"] else ""
            lines.append(f"Coordinator:  {coordinator['version']} ({where}{holder})")
        agents = document["agents"]
        counted = ", ".join(f"{v} on {n} node(s)" for v, n in sorted(agents.items()))
        lines.append(f"Agents:       {counted or 'none reported'}")
    lines.extend(f"warning: {w}" for w in document.get("warnings", []))
    return "".join(f"{line}\n" for line in lines)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    document: dict[str, Any] = {"client": gpuctl_version()}
    text = args.output == "table"
    if text and not args.client:
        # As kubectl's: this CLI's own version is said before the cluster is asked, so a
        # cluster that cannot be reached still leaves it on the screen.
        out.write(client_line(document))
        out.flush()
    if not args.client:
        api_client = load_api_client(args.kubeconfig, args.context, args.request_timeout)
        lease = find_lease(api_client, args.namespace, args.lease)
        version, holder = coordinator_version(api_client, args.namespace, lease)
        agents = agent_versions(api_client)
        document["coordinator"] = {
            "version": version,
            "holder": holder,
            "lease": f"{args.namespace}/{lease}",
        }
        document["agents"] = agents
        document["warnings"] = skew_warnings(document["client"], version, agents)
    if not text:
        out.write(render_document(document, args.output))
    else:
        out.write(render(document) if args.client else cluster_lines(document))
    return 0
