"""The flags of `gpuctl-agent run` and the DaemonConfig they make.

Kept free of grpc and the daemon's loop so that building the whole `gpuctl-agent` parser
(which `gpuctl-agent inspect`, run by `gpuctl node inspect --local`, also does) stays cheap.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.daemon.backoff import Backoff
from agent.daemon.config import (
    DEFAULT_GRPC_HEALTH_PORT,
    DEFAULT_HEALTH_PORT,
    DEFAULT_TOKEN_FILE,
    DaemonConfig,
)
from gpuctl.common.client_transport import (
    ClientConfigError,
    add_transport_arguments,
    transport_from_args,
)

RUN_DESCRIPTION = """\
Keep one gRPC stream open to the coordinator and report this node's Intel GPUs and xe
module on it: the full NodeReport when the stream opens, again whenever a kernel uevent
(PCI, DRM, module) or the periodic rescan shows a change, and in answer to the
coordinator's inspect requests; heartbeats in between. Reconnects with jittered exponential
backoff and re-reads the token file on every connect.

In the DaemonSet: hostPID and CAP_SYS_PTRACE (to see which processes hold /dev/dri open),
hostNetwork (kernel uevents are only visible in the host's network namespace), the host's
/ mounted read-only at /host, NODE_NAME from the downward API, and a projected
service-account token with gpuctl's audience at --token-file.

Local run against a plaintext test coordinator:
  gpuctl-agent run --coordinator 127.0.0.1:9443 --insecure --token-file ./token \\
      --node-name $(hostname) --health-port 0 --grpc-health-port 0
"""

RUN_EPILOG = """\
health: GET /healthz is 200 while inspections succeed (503 with the reason otherwise);
GET /readyz is 200 while connected to the coordinator; both bodies are JSON saying
connected or not and since when. gRPC health (grpc.health.v1) on --grpc-health-port:
service "" or "liveness" = /healthz, "readiness" = /readyz.
Logs are JSON lines on stderr, each with the node name.
"""


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text}")
    return value


def add_run_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser(
        "run",
        help="the node daemon: stream this node's reports to the coordinator",
        description=RUN_DESCRIPTION,
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_transport_arguments(
        run, required=True, target_help="the coordinator's agent endpoint (gRPC)"
    )
    run.add_argument(
        "--token-file",
        type=Path,
        default=DEFAULT_TOKEN_FILE,
        metavar="PATH",
        help="projected service-account token sent as 'authorization: Bearer'; re-read on "
        "every connect (default: %(default)s)",
    )
    run.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="read the node under DIR (default: /; the DaemonSet mounts the host paths the "
        "agent reads under /host, read-only)",
    )
    run.add_argument(
        "--node-name",
        metavar="NAME",
        help="this node's Kubernetes name (default: $NODE_NAME, else the host's hostname); "
        "must be the node the token is bound to",
    )
    run.add_argument(
        "--health-address",
        default="0.0.0.0",  # noqa: S104 - kubelet probes the pod IP
        metavar="ADDR",
        help="address of both health servers (default: %(default)s)",
    )
    run.add_argument(
        "--health-port",
        type=_port,
        default=DEFAULT_HEALTH_PORT,
        metavar="PORT",
        help="HTTP /healthz and /readyz; 0 = off (default: %(default)s)",
    )
    run.add_argument(
        "--grpc-health-port",
        type=_port,
        default=DEFAULT_GRPC_HEALTH_PORT,
        metavar="PORT",
        help="grpc.health.v1 for kubelet grpc probes; 0 = off (default: %(default)s)",
    )
    run.add_argument(
        "--rescan-interval",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="rescan period until the coordinator's Welcome sets one, and while "
        "disconnected (default: %(default)g)",
    )
    run.add_argument(
        "--backoff-initial",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="first reconnect delay ceiling; doubles per failure (default: %(default)g)",
    )
    run.add_argument(
        "--backoff-max",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="reconnect delay ceiling; each delay is uniform in [0, ceiling] "
        "(default: %(default)g)",
    )
    run.add_argument(
        "--no-udev",
        action="store_true",
        help="do not listen to kernel uevents; rely on the periodic rescan",
    )
    run.add_argument(
        "--allow-node-changes",
        action="store_true",
        help="serve the coordinator's PrepareRequest/RestoreRequest by writing the host's "
        "sysfs (unbind idle functions, sriov_numvfs); needs DIR/sys writable. Without it "
        "they are answered with an error and nothing is changed",
    )
    run.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe level of the JSON log lines on stderr (default: %(default)s)",
    )


def config_from_args(args: argparse.Namespace, node_name: str) -> DaemonConfig:
    if args.backoff_max < args.backoff_initial:
        raise ClientConfigError("--backoff-max must be at least --backoff-initial")
    return DaemonConfig(
        host_root=args.host_root,
        node_name=node_name,
        transport=transport_from_args(args),
        token_file=args.token_file,
        health_address=args.health_address,
        health_port=args.health_port,
        grpc_health_port=args.grpc_health_port,
        backoff=Backoff(initial=args.backoff_initial, cap=args.backoff_max),
        default_rescan_interval=args.rescan_interval,
        udev=not args.no_udev,
        allow_node_changes=args.allow_node_changes,
    )
