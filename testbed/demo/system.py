"""The whole gpuctl system on this machine, started in order and stopped in reverse.

`running_system` starts a local control plane (testbed/harness: etcd, kube-apiserver,
kube-controller-manager, with KMM's CRDs and the chart's), kube-scheduler, the node and
DaemonSet controllers and kwok as the nodes' kubelets (testbed/harness/node_lifecycle.py: the
GPU daemons are a real DaemonSet), the coordinator's ServiceAccount
under the chart's RBAC (coordinator/policies/rbac.py, which the chart's template is generated from),
KMM's own operator (testbed/harness/real_kmm.py), and the rollout rig that runs the coordinator
and the agents as real processes (testbed/rollout_live). Everything lives in one temporary
folder, which is removed on the way out, as every process is stopped: on success, on an error
and on Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import datetime
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.kube.client import Kube, path
from testbed.coordinator_rbac import bound_coordinator, token_kubeconfig
from testbed.demo.narrator import Narrator
from testbed.harness.access import KubeCluster
from testbed.harness.binaries import find_binaries
from testbed.harness.cluster import repository_root, start_cluster
from testbed.harness.kmm_build import find_kmm
from testbed.harness.kwok import find_kwok
from testbed.harness.node_lifecycle import start_node_lifecycle
from testbed.harness.nodes import DEFAULT_KERNEL, create_node
from testbed.harness.real_kmm import RealKmm
from testbed.harness.serving_tls import serving_tls
from testbed.rollout_live.rig import RolloutRig

NAMESPACE = "gpuctl-system"
TOKEN_SECONDS = 2 * 3600


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class System:
    folder: Path
    cluster: KubeCluster
    rig: RolloutRig

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig, as `gpuctl` and `kubectl` would use it."""
        return self.cluster.kubeconfig


@contextlib.contextmanager
def running_system(environ: Mapping[str, str], narrator: Narrator) -> Iterator[System]:
    folder = Path(tempfile.mkdtemp(prefix="gpuctl-demo-"))
    with contextlib.ExitStack() as stack:
        stack.callback(narrator.note, f"removed {folder}")
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        narrator.step("starting the control plane: etcd, kube-apiserver, kube-controller-manager")
        narrator.note(f"everything the demo makes lives in {folder} (removed at the end)")
        control_plane, cluster = start_cluster(
            folder / "cluster", repository_root(), environ, _now(), die_with_parent=True
        )
        stack.callback(control_plane.stop)
        stack.callback(cluster.close_clients)
        stack.callback(narrator.note, "stopping the control plane")
        narrator.note(f"API server {cluster.server}; CRDs: KMM's Module and the chart's")
        narrator.note("(charts/gpuctl/crds: GPUDriver, GPUNode)")
        lifecycle = start_node_lifecycle(
            control_plane.layout,
            kube_folder=find_binaries(repository_root(), environ).apiserver.parent,
            kwok_binary=find_kwok(repository_root(), environ),
            die_with_parent=True,
        )
        stack.callback(lifecycle.stop)
        narrator.note("kube-scheduler, the node and DaemonSet controllers, and kwok playing")
        narrator.note("each node's kubelet (Leases, pods Running)")
        admin = stack.enter_context(cluster.admin_client())
        kube = Kube(admin)

        narrator.step(f"namespace {NAMESPACE} and the coordinator's RBAC from the chart's rules")
        kube.request("POST", path("", "v1", "namespaces"), body={"metadata": {"name": NAMESPACE}})
        account = stack.enter_context(bound_coordinator(kube, NAMESPACE))
        token = cluster.service_account_token(NAMESPACE, account, expiration_seconds=TOKEN_SECONDS)
        coordinator_kubeconfig = token_kubeconfig(
            folder / "coordinator.kubeconfig", cluster.server, cluster.ca_cert, token
        )
        narrator.note(
            f"ServiceAccount {account}: the rules of charts/gpuctl/templates/coordinator-rbac.yaml"
        )
        narrator.note(
            "(from coordinator/policies/rbac.py), bound as the chart binds them, and no more"
        )

        narrator.step("starting KMM: its own manager and webhook server, built from its source")
        kmm = RealKmm(
            find_kmm(repository_root(), environ),
            admin,
            cluster.kubeconfig,
            NAMESPACE,
            folder / "kmm",
        )
        kmm.start()
        stack.callback(kmm.close)
        narrator.note(f"KMM {kmm.operator.build.version}; a stand-in kubelet runs its Pods: KMM's")
        narrator.note("worker binary loads and unloads xe on each node's fake host root")

        def make_node(
            name: str, labels: Mapping[str, str] | None = None, kernel_version: str = DEFAULT_KERNEL
        ) -> Any:
            return create_node(admin, name, labels or {}, _now(), kernel_version)

        (folder / "nodes").mkdir()
        rig = RolloutRig(
            cluster=cluster,
            namespace=NAMESPACE,
            kube=kube,
            admin=admin,
            kmm=kmm,
            tls=serving_tls(folder / "grpc-tls"),
            make_node=make_node,
            folder=folder / "nodes",
        )
        rig.coordinator_kubeconfig = coordinator_kubeconfig
        stack.callback(rig.close)
        stack.callback(
            narrator.step, "stopping everything: coordinator, agents, KMM, control plane"
        )
        yield System(folder, cluster, rig)
