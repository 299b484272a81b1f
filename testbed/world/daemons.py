"""The world's GPU DaemonSets, real ones: the DaemonSet controller makes their pods, a
kube-scheduler binds them, and DaemonRuntime (testbed/rollout_live/gpu_daemons.py) runs their
processes on the nodes' fake hosts, each holding the render node open.

The world's control plane runs no workload controllers and no scheduler (testbed/harness/
flags.py), so `world_daemons` starts, beside it, a kube-controller-manager with only the
DaemonSet controller, and a kube-scheduler whose one profile (SCHEDULER) schedules only the
pods that name it: the world's DaemonSets' (KMM's pods keep their own kubelet, testbed/harness/
kubelet, and nothing else is bound by it). The node-lifecycle controller is left out on
purpose: the world's nodes have no kubelet heartbeat, and it would mark them all unreachable.
A kubelet reports its node's pod capacity, which the scheduler needs (`report_capacity`).
The agents' pods (testbed/cluster_agents.py: bare pods their tokens are bound to) stand in for
the chart's agent DaemonSet's, and carry its pods' AGENT_LABEL (`label_agent_pods`), by which
the admin's drain leaves them as `kubectl drain --ignore-daemonsets` leaves a DaemonSet's.

Two DaemonSets come and go (testbed/world/events.py):
- PAUSED, declared in the GPUDriver's `rollout.pause` and selecting `gpuctl.dev/driver-ready`
  (docs/gpu-daemons.md): XPU Manager, paused for each node's step;
- UNDECLARED, selecting the world's GPU nodes and declared nowhere (an exporter someone
  installed): it holds the GPU, so a node it runs on is Blocked, naming it, never unloaded.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from gpuctl.common import names
from testbed.harness import health, processes
from testbed.harness.binaries import find_binaries
from testbed.harness.cluster import repository_root
from testbed.harness.control_plane import Component
from testbed.harness.layout import LOOPBACK, Layout
from testbed.harness.node_lifecycle import START_SECONDS, lifecycle_controllers_args
from testbed.harness.ports import free_loopback_ports
from testbed.rollout_live.gpu_daemons import DaemonRuntime, daemon_set
from testbed.rollout_live.rig import RolloutRig

SCHEDULER = "gpuctl-world-daemons"
PAUSED = "xpumanager"
UNDECLARED = "gpu-exporter"
# How long a node waits for its paused pods to be back after its step (rollout.pause.timeout):
# the DaemonSet may be deleted mid-step, and then they never are.
PAUSE_TIMEOUT = "30s"
# The pods a kubelet says its node holds (its --max-pods default).
MAX_PODS = "110"
HTTP_NOT_FOUND = 404
# The label of the chart's agent pods (charts/gpuctl/templates/agent-daemonset.yaml).
AGENT_LABEL = ("app.kubernetes.io/component", "agent")

SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
leaderElection:
  leaderElect: false
profiles:
- schedulerName: {name}
"""


@functools.cache
def kube_folder() -> Path:
    """The folder of the control plane's binaries (kube-scheduler, kubectl among them)."""
    return find_binaries(repository_root(), os.environ).apiserver.parent


def pause_settings(namespace: str) -> dict[str, object]:
    """The GPUDriver's `rollout.pause`: PAUSED declared."""
    return {"daemonSets": [f"{namespace}/{PAUSED}"], "timeout": PAUSE_TIMEOUT}


def report_capacity(kube: Kube, node: str) -> None:
    """The node's pod capacity, as its kubelet reports it in its status."""
    pods = {"pods": MAX_PODS}
    kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node, subresource="status"),
        body={"status": {"capacity": pods, "allocatable": pods}},
        content_type=MERGE_PATCH,
    )


def label_agent_pods(kube: Kube, namespace: str, pods: list[str]) -> None:
    """The agent pods labelled as the chart's agent DaemonSet labels its pods."""
    key, value = AGENT_LABEL
    for pod in pods:
        kube.request(
            "PATCH",
            path("", "v1", "pods", namespace=namespace, name=pod),
            body={"metadata": {"labels": {key: value}}},
            content_type=MERGE_PATCH,
        )


def _start(
    components: list[Component], name: str, argv: list[str], url: str, layout: Layout
) -> None:
    log_file = layout.log_file(name)
    process = processes.start_in_own_group(argv, log_file, die_with_parent=True)
    components.append(Component(name, argv, process))
    health.wait_healthy(
        name,
        url,
        process,
        log_file=log_file,
        timeout_seconds=START_SECONDS,
        context=health.insecure_loopback_context(),
    )


@dataclass
class WorldDaemons:
    kube: Kube
    namespace: str
    runtime: DaemonRuntime

    def exists(self, name: str) -> bool:
        try:
            self.kube.request(
                "GET", path("apps", "v1", "daemonsets", namespace=self.namespace, name=name)
            )
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return False
            raise
        return True

    def create(self, name: str, node_selector: dict[str, str]) -> None:
        daemon_set(
            self.kube, self.namespace, name, node_selector=node_selector, scheduler_name=SCHEDULER
        )

    def delete(self, name: str) -> None:
        """`kubectl delete daemonset`: its pods go with it (background propagation)."""
        self.kube.request(
            "DELETE",
            path("apps", "v1", "daemonsets", namespace=self.namespace, name=name),
            body={"propagationPolicy": "Background"},
        )

    def holds(self, name: str) -> set[str]:
        """The nodes a pod of DaemonSet `name` holds the GPU of now."""
        return {
            node for node, started in self.runtime.running().items() if started.pod.startswith(name)
        }


def selectors(selected: dict[str, str]) -> dict[str, dict[str, str]]:
    """What each DaemonSet selects: PAUSED gpuctl's label, UNDECLARED the world's GPU nodes."""
    return {PAUSED: {names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}, UNDECLARED: selected}


@contextlib.contextmanager
def world_daemons(
    layout: Layout, rig: RolloutRig, on_open: Callable[[str], None]
) -> Iterator[WorldDaemons]:
    """The DaemonSet controller and the world's scheduler on `layout`'s control plane, and the
    runtime of the DaemonSets' pods on `rig`'s hosts; stopped after."""
    folder = kube_folder()
    config = layout.root / "world-scheduler.yaml"
    config.write_text(SCHEDULER_CONFIG.format(kubeconfig=layout.admin_kubeconfig, name=SCHEDULER))
    scheduler_port, controllers_port = free_loopback_ports(2)
    components: list[Component] = []
    runtime = DaemonRuntime(rig.kube, rig.namespace, rig.hosts, on_open=on_open, needs_device=True)
    try:
        _start(
            components,
            "world-daemonset-controller",
            lifecycle_controllers_args(
                folder / "kube-controller-manager",
                layout,
                controllers_port,
                grace_seconds=40,
                controllers=("daemonset-controller",),
            ),
            f"https://{LOOPBACK}:{controllers_port}/healthz",
            layout,
        )
        _start(
            components,
            "world-scheduler",
            [
                str(folder / "kube-scheduler"),
                f"--config={config}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={scheduler_port}",
                f"--cert-dir={layout.root / 'world-scheduler-serving'}",
            ],
            f"https://{LOOPBACK}:{scheduler_port}/healthz",
            layout,
        )
        runtime.start()
        yield WorldDaemons(rig.kube, rig.namespace, runtime)
    finally:
        runtime.stop()
        while components:
            processes.stop_child(components.pop().process)
