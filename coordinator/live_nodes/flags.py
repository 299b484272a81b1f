"""The `gpuctl-coordinator` flags of the agents' gRPC server, and the config they make.

Without `--grpc-port` the coordinator serves no agents, so the rollout, which needs a fresh
report for every load and unload, moves no node (the chart always sets it).
With it, TLS is required: from files (`--tls-cert-file` + `--tls-key-file`, e.g. a cert-manager
Secret mounted), or from a Secret the leader keeps itself (`--tls-secret`,
coordinator/live_nodes/tls/managed_tls.py); plaintext only when `--insecure-grpc` says so
explicitly, for local runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from coordinator.live_nodes.live import LiveNodesConfig
from coordinator.live_nodes.server import DEFAULT_MAX_MESSAGE_BYTES, ServerConfig, TlsFiles
from coordinator.live_nodes.streams.agent_service import AgentServiceConfig
from coordinator.live_nodes.tls.managed_tls import ManagedTlsConfig, service_names
from gpuctl.common.names import AGENT_AUDIENCE

DEFAULT_AGENT_ACCOUNT = "gpuctl-agent"
DEFAULT_SERVICE = "gpuctl-coordinator"
DEFAULT_HEARTBEAT = 10.0


class AgentFlagsError(ValueError):
    """A combination of flags that cannot work; the text says which."""


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "live node reports (agents' gRPC streams, NodeService, GPUNode mirror)"
    )
    group.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve AgentService and NodeService on this port (0: any free port); "
        "without it no agents are served and the rollout moves no node (default: off)",
    )
    group.add_argument(
        "--grpc-address",
        default="0.0.0.0",  # noqa: S104 - agents on every node connect to the pod IP
        metavar="ADDR",
        help="address the gRPC server listens on (default: %(default)s)",
    )
    group.add_argument(
        "--tls-cert-file",
        type=Path,
        metavar="PEM",
        help="the gRPC server's certificate, re-read when the file changes (required with "
        "--grpc-port, unless --insecure-grpc)",
    )
    group.add_argument(
        "--tls-key-file",
        type=Path,
        metavar="PEM",
        help="the private key of --tls-cert-file, re-read with it",
    )
    group.add_argument(
        "--tls-secret",
        metavar="NAME",
        help="serve with the certificate in this Secret of --namespace instead of files: the "
        "leader makes a self-signed CA and certificate there when it is missing, renews the "
        "certificate 30 days before it expires, and writes the CA to --tls-ca-configmap",
    )
    group.add_argument(
        "--tls-ca-configmap",
        metavar="NAME",
        help="with --tls-secret: the ConfigMap (key ca.crt) the agents read the CA from "
        "(default: <--tls-secret>-ca)",
    )
    group.add_argument(
        "--tls-service",
        metavar="NAME",
        help="with --tls-secret: the gRPC Service whose names the certificate carries "
        "(NAME, NAME.<namespace>, NAME.<namespace>.svc[.cluster.local]; default: "
        "gpuctl-coordinator)",
    )
    group.add_argument(
        "--tls-check-interval",
        type=_positive,
        default=3600.0,
        metavar="SECONDS",
        help="with --tls-secret: how often the leader checks whether the certificate is due "
        "(default: %(default)g)",
    )
    group.add_argument(
        "--insecure-grpc",
        action="store_true",
        help="plaintext gRPC, no TLS: only for local runs",
    )
    group.add_argument(
        "--agent-audience",
        default=AGENT_AUDIENCE,
        metavar="AUDIENCE",
        help="audience agents' projected tokens must carry (default: %(default)s)",
    )
    group.add_argument(
        "--agent-service-account",
        default=None,
        metavar="USERNAME",
        help="the agents' ServiceAccount as a user name "
        f"(default: system:serviceaccount:<namespace>:{DEFAULT_AGENT_ACCOUNT})",
    )
    group.add_argument(
        "--heartbeat-interval",
        type=_positive,
        default=DEFAULT_HEARTBEAT,
        metavar="SECONDS",
        help="agents heartbeat this often when idle (sent in Welcome; default: %(default)g)",
    )
    group.add_argument(
        "--rescan-interval",
        type=_positive,
        default=300.0,
        metavar="SECONDS",
        help="agents rescan this often without a uevent (sent in Welcome; default: %(default)g)",
    )
    group.add_argument(
        "--report-freshness",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="a node not heard from for longer is unknown, and unknown blocks unloads; must be "
        "longer than --heartbeat-interval (default: 3 x --heartbeat-interval)",
    )
    group.add_argument(
        "--max-reports-per-minute",
        type=int,
        default=60,
        metavar="N",
        help="per agent; more are dropped, answers to the coordinator's requests never "
        "(sent in Welcome; default: %(default)s)",
    )
    group.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="BYTES",
        help="largest gRPC message received or sent, at least 65536 (default: %(default)s)",
    )
    group.add_argument(
        "--gpunode-writes-per-second",
        type=_positive,
        default=50.0,
        metavar="N",
        help="at most this many GPUNode status writes per second overall; changes wait and "
        "coalesce per node (default: %(default)g)",
    )
    group.add_argument(
        "--inspect-timeout",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="how long a GPUNode spec.inspectRequest waits for the agent (default: %(default)g)",
    )


def _managed_tls(args: argparse.Namespace, namespace: str) -> ManagedTlsConfig | None:
    if args.tls_secret is None:
        if args.tls_ca_configmap or args.tls_service:
            raise AgentFlagsError("--tls-ca-configmap and --tls-service need --tls-secret")
        return None
    if args.tls_cert_file or args.tls_key_file or args.insecure_grpc:
        raise AgentFlagsError(
            "--tls-secret excludes --tls-cert-file, --tls-key-file and --insecure-grpc"
        )
    return ManagedTlsConfig(
        namespace=namespace,
        secret=args.tls_secret,
        ca_configmap=args.tls_ca_configmap or f"{args.tls_secret}-ca",
        dns_names=service_names(args.tls_service or DEFAULT_SERVICE, namespace),
        check_seconds=args.tls_check_interval,
    )


def _tls(args: argparse.Namespace) -> TlsFiles | None:
    cert, key = args.tls_cert_file, args.tls_key_file
    if (cert is None) != (key is None):
        raise AgentFlagsError("--tls-cert-file and --tls-key-file go together")
    if cert is not None and args.insecure_grpc:
        raise AgentFlagsError("--insecure-grpc and TLS files exclude each other")
    if cert is None and not args.insecure_grpc and args.tls_secret is None:
        raise AgentFlagsError(
            "--grpc-port needs --tls-secret, or --tls-cert-file and --tls-key-file (or "
            "--insecure-grpc for a local run)"
        )
    if cert is None:
        return None
    for flag, file in (("--tls-cert-file", cert), ("--tls-key-file", key)):
        if not file.is_file():
            raise AgentFlagsError(f"{flag} {file}: no such file")
    return TlsFiles(cert, key)


def live_nodes_config(args: argparse.Namespace, namespace: str) -> LiveNodesConfig | None:
    """The config the flags describe; None without --grpc-port. AgentFlagsError if invalid."""
    if args.grpc_port is None:
        return None
    if not 0 <= args.grpc_port <= 65535:
        raise AgentFlagsError(f"--grpc-port {args.grpc_port} is not a TCP port")
    freshness = args.report_freshness or 3 * args.heartbeat_interval
    if freshness <= args.heartbeat_interval:
        raise AgentFlagsError("--report-freshness must be longer than --heartbeat-interval")
    if args.max_reports_per_minute < 1:
        raise AgentFlagsError("--max-reports-per-minute must be at least 1")
    if args.max_message_bytes < 64 * 1024:
        raise AgentFlagsError("--max-message-bytes must be at least 65536")
    username = args.agent_service_account or (
        f"system:serviceaccount:{namespace}:{DEFAULT_AGENT_ACCOUNT}"
    )
    return LiveNodesConfig(
        server=ServerConfig(
            agents=AgentServiceConfig(
                audience=args.agent_audience,
                agent_username=username,
                heartbeat_seconds=args.heartbeat_interval,
                rescan_seconds=args.rescan_interval,
                max_reports_per_minute=args.max_reports_per_minute,
            ),
            host=args.grpc_address,
            port=args.grpc_port,
            tls=_tls(args),
            managed_tls=_managed_tls(args, namespace),
            insecure=args.insecure_grpc,
            report_freshness_seconds=freshness,
            max_message_bytes=args.max_message_bytes,
        ),
        inspect_timeout_seconds=args.inspect_timeout,
        mirror_max_writes_per_second=args.gpunode_writes_per_second,
        node_selector=args.node_selector,
    )
