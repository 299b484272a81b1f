"""Simulated nodes with a real lifecycle: kube-scheduler, the node controllers, and kwok.

The plain local control plane has no kubelets, no scheduler and no node or workload
controllers, so a Pod there is never scheduled nor run, and a Node never goes NotReady. For
tests that need those, ``start_node_lifecycle`` adds to a running control plane:

- kube-scheduler (binds Pods to Nodes, honouring extended resources, cordons and taints);
- a second kube-controller-manager running only the controllers a real cluster has around
  Nodes and workloads: node-lifecycle (NotReady/Unknown conditions and their
  ``node.kubernetes.io/not-ready``/``unreachable`` taints, the ``unschedulable`` taint of a
  cordoned Node), taint-eviction, disruption (PodDisruptionBudget status, which the Eviction
  API enforces with 429), ReplicaSet and Deployment (which replace evicted Pods), DaemonSet
  (GPU daemons, which come and go with the labels they select on);
- kwok (``testbed/harness/kwok.py``), playing every Node's kubelet.

Because the node-lifecycle controller marks every Node without a heartbeat unreachable, this
belongs on a control plane of its own (``tests/integration/kwok/conftest.py``), never on the
one the other tests share. The node monitor's grace period is short (``NODE_GRACE_SECONDS``)
so a test sees a stopped heartbeat within seconds, and long against kwok's Lease renewals
(every ``LEASE_SECONDS / 4``) so a loaded machine does not make a live Node look dead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from testbed.harness import health, kwok, processes
from testbed.harness.binaries import MissingBinariesError
from testbed.harness.control_plane import Component
from testbed.harness.layout import LOOPBACK, Layout
from testbed.harness.ports import free_loopback_ports

START_SECONDS = 120.0
NODE_GRACE_SECONDS = 20
NODE_MONITOR_PERIOD_SECONDS = 1
LEASE_SECONDS = 8

CONTROLLERS = (
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "disruption-controller",
    "replicaset-controller",
    "deployment-controller",
    "daemonset-controller",
)


def scheduler_args(binary: Path, layout: Layout, port: int) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.admin_kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={layout.root / 'scheduler-serving'}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def lifecycle_controllers_args(
    binary: Path,
    layout: Layout,
    port: int,
    *,
    grace_seconds: int,
    controllers: tuple[str, ...] = CONTROLLERS,
) -> list[str]:
    """A kube-controller-manager running only `controllers` (default: CONTROLLERS)."""
    return [
        str(binary),
        f"--kubeconfig={layout.controller_manager_kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={layout.root / 'lifecycle-serving'}",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        "--use-service-account-credentials=true",
        f"--node-monitor-period={NODE_MONITOR_PERIOD_SECONDS}s",
        f"--node-monitor-grace-period={grace_seconds}s",
        "--profiling=false",
    ]


@dataclass
class NodeLifecycle:
    """The running scheduler, node controllers and kwok (stopped last started first)."""

    layout: Layout
    grace_seconds: int
    components: list[Component] = field(default_factory=list)

    def stop(self) -> None:
        while self.components:
            processes.stop_child(self.components.pop().process)


def start_node_lifecycle(
    layout: Layout,
    *,
    kube_folder: Path,
    kwok_binary: Path,
    die_with_parent: bool,
    grace_seconds: int = NODE_GRACE_SECONDS,
    lease_seconds: int = LEASE_SECONDS,
) -> NodeLifecycle:
    """Starts them against the control plane of ``layout``; binaries from ``kube_folder``
    (``hack/kube/ensure``'s folder) and ``kwok_binary``. Returns once each is healthy."""
    for binary in (kube_folder / "kube-scheduler", kube_folder / "kube-controller-manager"):
        if not os.access(binary, os.X_OK):
            raise MissingBinariesError(
                f"{binary} is missing: hack/kube/ensure builds it (unset KUBEBUILDER_ASSETS "
                "to use its cached build)"
            )
    scheduler_port, controllers_port, kwok_port = free_loopback_ports(3)
    stages = layout.root / "kwok-stages.yaml"
    stages.write_text(kwok.STAGES)
    started = NodeLifecycle(layout, grace_seconds)
    plan = [
        (
            "kube-scheduler",
            scheduler_args(kube_folder / "kube-scheduler", layout, scheduler_port),
            f"https://{LOOPBACK}:{scheduler_port}/healthz",
        ),
        (
            "node-lifecycle-controllers",
            lifecycle_controllers_args(
                kube_folder / "kube-controller-manager",
                layout,
                controllers_port,
                grace_seconds=grace_seconds,
            ),
            f"https://{LOOPBACK}:{controllers_port}/healthz",
        ),
        (
            "kwok",
            kwok.kwok_args(
                kwok_binary,
                kubeconfig=layout.admin_kubeconfig,
                stages=stages,
                port=kwok_port,
                lease_seconds=lease_seconds,
            ),
            kwok.health_url(kwok_port),
        ),
    ]
    try:
        for name, argv, url in plan:
            log_file = layout.log_file(name)
            process = processes.start_in_own_group(argv, log_file, die_with_parent=die_with_parent)
            started.components.append(Component(name, argv, process))
            health.wait_healthy(
                name,
                url,
                process,
                log_file=log_file,
                timeout_seconds=START_SECONDS,
                context=health.insecure_loopback_context() if url.startswith("https") else None,
            )
    except BaseException:
        started.stop()
        raise
    return started
