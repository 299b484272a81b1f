"""`gpuctl-coordinator`: the command line of the coordinator process.

Reads flags, builds the Kubernetes client (in-cluster by default, `--kubeconfig` for local
runs), sets up JSON logs and SIGTERM/SIGINT handling, and runs coordinator.manager.Coordinator
until told to stop. Exit status: 0 after a clean stop, 1 when leadership was lost (the
Deployment restarts the pod, which campaigns again), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from prometheus_client import CollectorRegistry, ProcessCollector

from coordinator.health import Liveness
from coordinator.kube.client import Kube
from coordinator.live_nodes.flags import AgentFlagsError, add_agent_arguments, live_nodes_config
from coordinator.live_nodes.live import LiveNodes, LiveNodesConfig
from coordinator.live_nodes.metrics import LiveNodesCollector
from coordinator.live_nodes.serving_label import ServingLabel
from coordinator.manager import Coordinator, CoordinatorConfig, LeaderScoped
from coordinator.metrics_http import (
    HealthChecks,
    MetricsServerError,
    add_metrics_arguments,
    serve_metrics,
    stop_metrics,
)
from coordinator.process_metrics import CoordinatorCollector, memory_limit_from
from coordinator.rollout.config import KuredLockConfig, PrometheusAccess
from coordinator.rollout.metrics import RolloutMetrics
from gpuctl.common import json_logs, names
from gpuctl.common.build_version import gpuctl_version
from gpuctl.common.label_selector import SelectorError, check_selector
from gpuctl.rollout.input.kured_lock import KURED_LOCK_ANNOTATION

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
FALLBACK_NAMESPACE = "gpuctl-system"

log = logging.getLogger("coordinator")

DESCRIPTION = """\
Reconcile GPUDriver objects (gpudrivers.gpuctl.dev) into KMM Modules
(modules.kmm.sigs.x-k8s.io) in this namespace and report their status. A Module selects only
the nodes the rollout labels gpuctl.dev/driver-target=<gpudriver>, so the xe driver is
loaded, reloaded and unloaded node by node, each node after its checks; deleting a GPUDriver
or removing its kernelModule unloads node by node, and the Module goes once no node is left.

With --grpc-port it also serves the node agents' report streams (AgentService) and the
direct read API (NodeService), and mirrors each node's report into a GPUNode object; the
rollout asks the agents for the fresh reports its checks need (without agents it moves no
node).

Runs in-cluster by default (the pod's ServiceAccount). For a local run against a cluster:
  gpuctl-coordinator --kubeconfig ~/.kube/config --namespace gpuctl-system
Of several replicas only the holder of the Lease <namespace>/<lease-name> acts.
"""


def default_namespace() -> str:
    """The pod's namespace in-cluster, else $POD_NAMESPACE, else gpuctl-system."""
    if SERVICE_ACCOUNT_NAMESPACE.is_file():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return os.environ.get("POD_NAMESPACE", FALLBACK_NAMESPACE)


def label_selector(text: str) -> str:
    """An argparse type: `text` if it is a label selector, else the usage error saying why."""
    try:
        return check_selector(text)
    except SelectorError as err:
        raise argparse.ArgumentTypeError(f"not a label selector: {err}") from None


def build_parser() -> argparse.ArgumentParser:
    """Every flag of `gpuctl-coordinator`. Building it reads and checks nothing, so tooling
    (hack/generate.py, which documents the flags) can use it."""
    parser = argparse.ArgumentParser(
        prog="gpuctl-coordinator",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="connect with this kubeconfig (default: the pod's in-cluster ServiceAccount)",
    )
    parser.add_argument(
        "--namespace",
        default=None,
        metavar="NAMESPACE",
        help="namespace of the Modules, the Lease and the pull/build secrets "
        "(default: the pod's namespace, $POD_NAMESPACE, or gpuctl-system)",
    )
    parser.add_argument(
        "--events-namespace",
        default="default",
        metavar="NAMESPACE",
        help="namespace for Events about GPUDrivers (cluster-scoped objects' Events "
        "live in 'default'; default: %(default)s)",
    )
    parser.add_argument(
        "--lease-name",
        default=names.DEFAULT_COORDINATOR_LEASE,
        metavar="NAME",
        help="the leader-election Lease in --namespace (default: %(default)s)",
    )
    parser.add_argument(
        "--identity",
        default=None,
        metavar="NAME",
        help="this replica's name in the Lease (default: <hostname>_<random>)",
    )
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how long a standby waits before taking over an unrenewed Lease "
        "(default: %(default)g)",
    )
    parser.add_argument(
        "--renew-deadline",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long the leader keeps trying to renew before it stops leading; shorter "
        "than --lease-duration (default: %(default)g)",
    )
    parser.add_argument(
        "--retry-period",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="time between Lease attempts and renewals (default: %(default)g)",
    )
    parser.add_argument(
        "--module-loader-service-account",
        default=None,
        metavar="NAME",
        help="ServiceAccount for KMM's module loader pods, set on every Module (the chart "
        "sets it on OpenShift; default: none set, KMM's default applies)",
    )
    parser.add_argument(
        "--gpudriver-selector",
        type=label_selector,
        default=None,
        metavar="SELECTOR",
        help="manage only GPUDrivers matching this label selector (e.g. team=a; default: all)",
    )
    parser.add_argument(
        "--node-selector",
        type=label_selector,
        default=None,
        metavar="SELECTOR",
        help="serve only the Nodes matching this label selector, one coordinator per node "
        "pool (e.g. gpuctl.dev/pool=a): watch, report on and roll out only those, and refuse "
        "other nodes' agents; give each such shard its own --gpudriver-selector "
        "(docs/deploying.md#sharding; default: every Node)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe level of the JSON log lines on stderr (default: %(default)s)",
    )
    parser.add_argument(
        "--rollout-blocked-recheck",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often the rollout asks a Blocked node's agent whether its blocker went "
        "away (default: %(default)g)",
    )
    parser.add_argument(
        "--resync-period",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="reconcile every GPUDriver and look at its rollout again this often even when no "
        "event came: a safety net, as controller-runtime's SyncPeriod (default: %(default)g)",
    )
    parser.add_argument(
        "--kmm-worker-hold",
        action="store_true",
        help="hold KMM's worker off a node whose devices were opened after the rollout's "
        "check (listed in an annotation of --namespace, which the chart's worker hold guard "
        "reads; docs/rollout.md#opened-after-the-check). Without the guard it does nothing",
    )
    parser.add_argument(
        "--prometheus-token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="send the token in FILE as 'Authorization: Bearer' to every GPUDriver's "
        "Prometheus gate (https:// urls only), read at each query so a rotated token is used; "
        "e.g. a projected ServiceAccount token for OpenShift's thanos-querier (default: none)",
    )
    parser.add_argument(
        "--prometheus-ca-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="verify https Prometheus gates against the CA bundle in FILE, read at each query "
        "(default: the system trust store)",
    )
    parser.add_argument(
        "--kured-lock",
        metavar="NAMESPACE/DAEMONSET",
        help="kured's DaemonSet, whose reboot lock the rollout holds while a node is in a step "
        "and waits on while kured holds it (docs/maintenance.md#kured) (default: none, kured "
        "is not looked at)",
    )
    parser.add_argument(
        "--kured-lock-annotation",
        default=KURED_LOCK_ANNOTATION,
        metavar="NAME",
        help="with --kured-lock: kured's --lock-annotation (default: %(default)s)",
    )
    parser.add_argument(
        "--kured-concurrency",
        type=int,
        default=1,
        metavar="N",
        help="with --kured-lock: kured's --concurrency, the lock's slots (default: %(default)s)",
    )
    add_metrics_arguments(parser)
    add_agent_arguments(parser)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags, checked together and completed (namespace, live node config); exits 2 with
    a usage message when they cannot work."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.rollout_blocked_recheck <= 0:
        parser.error("--rollout-blocked-recheck must be more than 0")
    if args.resync_period <= 0:
        parser.error("--resync-period must be more than 0")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        parser.error(f"--metrics-port {args.metrics_port} is not a TCP port")
    if args.renew_deadline >= args.lease_duration:
        parser.error("--renew-deadline must be shorter than --lease-duration")
    args.kured = None
    if args.kured_lock is not None:
        namespace, slash, daemon_set = args.kured_lock.partition("/")
        if not slash or not namespace or not daemon_set or "/" in daemon_set:
            parser.error(f"--kured-lock {args.kured_lock!r} is not NAMESPACE/DAEMONSET")
        if args.kured_concurrency < 1:
            parser.error("--kured-concurrency must be 1 or more")
        args.kured = KuredLockConfig(
            namespace, daemon_set, args.kured_lock_annotation, args.kured_concurrency
        )
    args.namespace = args.namespace or default_namespace()
    try:
        args.live_nodes = live_nodes_config(args, args.namespace)
    except AgentFlagsError as err:
        parser.error(str(err))
    return args


def live_nodes(kube: Kube, config: LiveNodesConfig | None, liveness: Liveness) -> LiveNodes | None:
    if config is None:
        return None
    return LiveNodes(
        kube,
        config,
        monotonic=time.monotonic,
        wall_clock=lambda: datetime.now(UTC),
        epoch_clock=time.time,
        liveness=liveness,
    )


# Connections kept to the API server: one per open watch (GPUDrivers, Modules, Nodes, claims,
# GPUNodes), the Lease, the reconciler, the GPUNode mirror and the rollout's parallel node
# writers (RolloutConfig.parallel_nodes). The client's default (5 per CPU) would make the
# surplus open a new TLS connection per request and throw it away.
API_CONNECTIONS = 48


def api_client(kubeconfig: str | None) -> k8s_client.ApiClient:
    configuration = k8s_client.Configuration()
    configuration.connection_pool_maxsize = API_CONNECTIONS
    if kubeconfig:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    else:
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    return k8s_client.ApiClient(configuration)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The HTTP stack's own chatter is not the coordinator's story.
    json_logs.configure(args.log_level, quiet=("urllib3",))
    identity = args.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    config = CoordinatorConfig(
        namespace=args.namespace,
        identity=identity,
        lease_name=args.lease_name,
        events_namespace=args.events_namespace,
        loader_service_account=args.module_loader_service_account,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        version=gpuctl_version(),
        driver_selector=args.gpudriver_selector,
        node_selector=args.node_selector,
        rollout_blocked_recheck_seconds=args.rollout_blocked_recheck,
        resync_seconds=args.resync_period,
        kmm_worker_hold=args.kmm_worker_hold,
        kured=args.kured,
        prometheus=PrometheusAccess(args.prometheus_token_file, args.prometheus_ca_file),
    )
    try:
        client = api_client(args.kubeconfig)
    except (k8s_config.ConfigException, OSError) as err:
        log.error("no Kubernetes configuration", extra={"error": str(err)})
        return 2
    try:
        memory_limit = memory_limit_from(os.environ)
    except ValueError as err:
        log.error("bad environment", extra={"error": str(err)})
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("starting", extra={"namespace": config.namespace, "identity": identity})
    kube = Kube(client)
    liveness = Liveness(time.monotonic)
    live = live_nodes(kube, args.live_nodes, liveness)
    leader_scoped: list[LeaderScoped] = []
    if live is not None:
        leader_scoped.append(live)
        pod = os.environ.get("POD_NAME")
        if pod:  # in the cluster: label this Pod while it serves, for the gRPC Service
            label = ServingLabel(kube, config.namespace, pod)
            label.stop()
            leader_scoped.append(label)
    registry = CollectorRegistry()
    if live is not None:
        registry.register(LiveNodesCollector(live, time.monotonic))
    coordinator = Coordinator(
        kube,
        config,
        leader_scoped=leader_scoped,
        rollout_agents=live.server if live else None,
        rollout_reports=live.server.registry if live else None,
        rollout_metrics=RolloutMetrics(registry),
        liveness=liveness,
    )
    # process_resident_memory_bytes, process_cpu_seconds_total, ...: the sizing advice and the
    # memory alert (docs/metrics.md) read them.
    ProcessCollector(registry=registry)
    registry.register(
        CoordinatorCollector(gpuctl_version(), coordinator.elector.leading.is_set, memory_limit)
    )
    metrics_server = None
    if args.metrics_port is not None:
        try:
            health = HealthChecks(liveness.verdict, coordinator.readiness)
            metrics_server, _ = serve_metrics(
                args.metrics_address, args.metrics_port, registry, health
            )
        except MetricsServerError as err:
            log.error("cannot serve metrics", extra={"error": str(err)})
            return 2
    runner = threading.Thread(target=coordinator.run, args=(stop,), name="coordinator")
    runner.start()
    while runner.is_alive():
        runner.join(timeout=0.5)
    if metrics_server is not None:
        stop_metrics(metrics_server)
    client.close()  # type: ignore[no-untyped-call]
    return 1 if coordinator.lost_leadership else 0


if __name__ == "__main__":
    sys.exit(main())
